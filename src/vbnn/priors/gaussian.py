"""Priors over layer weights. Later priors (log-uniform, Student-t, ARD) add a class here."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from vbnn.core.gaussian import (
    gaussian_log_prob,
    kl_diagonal_gaussian,
    kl_diagonal_gaussian_log_std,
    kl_to_isotropic_gaussian,
)


def per_model(value: float | torch.Tensor, like: torch.Tensor) -> float | torch.Tensor:
    """A scalar as is; a (M,) tensor reshaped to (M, 1, ..., 1) to broadcast against ``like``."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.to(like.dtype).reshape(-1, *([1] * (like.dim() - 1)))
    return value


@dataclass(frozen=True)
class GaussianPrior:
    """Factorised N(0, std^2) over every weight and bias of a layer.

    ``std`` is one number, or a (M,) tensor giving each model of the stack its own prior (the
    tuner trains hyper-parameter candidates side by side this way).
    """

    scale_invariant: ClassVar[bool] = False

    std: float | torch.Tensor = 1.0

    def __post_init__(self) -> None:
        if not bool((torch.as_tensor(self.std) > 0).all()):
            raise ValueError(f"GaussianPrior: std must be > 0, got {self.std!r}")

    def kl_diagonal(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        return kl_diagonal_gaussian(mean, std, per_model(self.std, mean))

    def kl_diagonal_log_std(
        self, mean: torch.Tensor, log_std: torch.Tensor, *more: torch.Tensor
    ) -> torch.Tensor:
        """``kl_diagonal`` with std = exp(log_std), computed in log space (fewer passes);
        ``more``: further (mean, log_std) pairs (``kl_diagonal_gaussian_log_std``)."""
        return kl_diagonal_gaussian_log_std(mean, log_std, per_model(self.std, mean), *more)

    def kl_correlated(
        self, mean: torch.Tensor, trace: torch.Tensor, log_det: torch.Tensor
    ) -> torch.Tensor:
        prior_std = per_model(self.std, mean[:, 0])  # (M,): one value per model's KL
        return kl_to_isotropic_gaussian(mean, trace, log_det, prior_std)

    def kl_uniform(self, log_scale: torch.Tensor) -> torch.Tensor:
        """KL(U(-theta, theta) || N(0, s^2)) per model, (M,), from log theta (M, ...):

            -log(2 theta) + 1/2 log(2 pi s^2) + theta^2 / (6 s^2)

        (E_q log q = -log(2 theta) and E_q w^2 = theta^2 / 3; Neklyudov et al. 2019 section 3.3)."""
        variance = per_model(self.std, log_scale) ** 2
        terms = (
            -(math.log(2.0) + log_scale)
            + 0.5 * torch.log(2.0 * math.pi * torch.as_tensor(variance, dtype=log_scale.dtype))
            + torch.exp(2.0 * log_scale) / (6.0 * variance)
        )
        return terms.reshape(log_scale.shape[0], -1).sum(1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        log_density = gaussian_log_prob(value, 0.0, per_model(self.std, value))
        return log_density.reshape(value.shape[0], -1).sum(1)
