"""Priors over layer weights. Later priors (log-uniform, Student-t, ARD) add a class here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vbnn.gaussian import gaussian_log_prob, kl_diagonal_gaussian, kl_full_gaussian_from_factor


@dataclass(frozen=True)
class GaussianPrior:
    """Factorised N(0, std^2) over every weight and bias of a layer."""

    std: float = 1.0

    def __post_init__(self) -> None:
        if not self.std > 0:
            raise ValueError(f"GaussianPrior: std must be > 0, got {self.std!r}")

    def kl_diagonal(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        return kl_diagonal_gaussian(mean, std, self.std)

    def kl_full(
        self, mean: torch.Tensor, strictly_lower: torch.Tensor, log_diagonal: torch.Tensor
    ) -> torch.Tensor:
        return kl_full_gaussian_from_factor(mean, strictly_lower, log_diagonal, self.std)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return gaussian_log_prob(value, 0.0, self.std).reshape(value.shape[0], -1).sum(1)
