"""GD: factorised Gaussian with one fixed, user-set standard deviation; only means are learned.

q(W_ij) = N(mu_ij, s^2). The overpruning paper (000_e87e55bc25ea4726.txt) calls this Gaussian
dropout after its equivalence to that model (Kingma et al. 2015); it is also "fast dropout".
With every variance equal, the LRT variance of output j is s^2 (1 + sum_i x_i^2): one reduction
over the inputs instead of a second matrix product.
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.base import affine, initial_means, require_generators


class FixedVarianceLinear(nn.Module):
    """Dense layer with q(W, b) = prod N(mu, s^2), s fixed; LRT in SAMPLE mode."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators,
        posterior_std: float | torch.Tensor = 1e-4,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.num_models = len(generators)
        std = torch.as_tensor(posterior_std, dtype=dtype).expand(self.num_models).clone()
        if not bool((std > 0).all()):
            raise ValueError(f"FixedVarianceLinear: posterior_std must be > 0, got {posterior_std}")
        self.register_buffer("std", std)  # (M,): one fixed std per model
        weight, bias = initial_means(generators, in_features, out_features, dtype)
        self.weight_mean = nn.Parameter(weight)
        self.bias_mean = nn.Parameter(bias)

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode = ForwardMode.SAMPLE,
        generators: ModelGenerators | None = None,
    ) -> torch.Tensor:
        mean = affine(x, self.weight_mean, self.bias_mean)
        if mode is ForwardMode.MEAN:
            return mean
        generators = require_generators(generators, mode)
        if mode is ForwardMode.WEIGHTS:
            eps_w = generators.randn(self.in_features + 1, self.out_features, dtype=x.dtype)
            return mean + self.std.view(-1, 1, 1) * affine(x, eps_w[:, :-1], eps_w[:, -1])
        scale = self.std.view(-1, 1, 1) * torch.sqrt(1.0 + (x * x).sum(-1, keepdim=True))
        eps = generators.randn(x.shape[1], self.out_features, dtype=x.dtype)
        return torch.addcmul(mean, scale, eps)

    def kl(self, prior: Prior) -> torch.Tensor:
        weight_std, bias_std = self.posterior_std()
        return prior.kl_diagonal(self.weight_mean, weight_std) + prior.kl_diagonal(
            self.bias_mean, bias_std
        )

    def posterior_mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_mean, self.bias_mean

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            self.std.view(-1, 1, 1).expand_as(self.weight_mean),
            self.std.view(-1, 1).expand_as(self.bias_mean),
        )
