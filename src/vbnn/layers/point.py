"""Point layers: deterministic weights, for maximum likelihood (ES) and MAP."""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.base import affine, initial_means


class PointLinear(nn.Module):
    """Dense layer with point weights; every forward mode gives the same output.

    A point estimate is not a distribution: ``kl`` raises, and MAP uses ``log_prior`` instead.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators,
        posterior_std: float = 0.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.num_models = len(generators)
        weight, bias = initial_means(generators, in_features, out_features, dtype)
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias)

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode = ForwardMode.MEAN,
        generators: ModelGenerators | None = None,
    ) -> torch.Tensor:
        return affine(x, self.weight, self.bias)

    def kl(self, prior: Prior) -> torch.Tensor:
        raise TypeError("PointLinear has no posterior distribution: use log_prior for MAP")

    def log_prior(self, prior: Prior) -> torch.Tensor:
        """log p(W) + log p(b) per model, (M,)."""
        return prior.log_prob(self.weight) + prior.log_prob(self.bias)

    def posterior_mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight, self.bias

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros_like(self.weight), torch.zeros_like(self.bias)
