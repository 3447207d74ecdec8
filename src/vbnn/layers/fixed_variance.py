"""GD: factorised Gaussian with one fixed, user-set standard deviation; only means are learned.

q(W_ij) = N(mu_ij, s^2), and likewise for every bias. Trippe & Turner 2017 call this Gaussian
dropout after its equivalence to that model (Kingma et al. 2015); it is also "fast dropout". With
every variance equal, the LRT variance of a dense output j is s^2 (1 + sum_i x_i^2): one reduction
over the inputs instead of a second matrix product (the shell's general LRT computes the same for
convolutions and layers without a bias).
"""

from __future__ import annotations

from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ParameterRole, Prior
from vbnn.core.defaults import INIT_STD
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import Moments, VariationalLayer
from vbnn.priors.kl import DiagonalGaussian, kl_divergence


class FixedVariance(VariationalLayer):
    """q(W, b) = prod N(mu, s^2), s fixed; LRT in LOCAL mode; dense, or a convolution.

    The other arguments are those of ``MeanField``.

    Args:
        std: the fixed posterior std s (> 0), never learned; a (M,) tensor gives each model of a
            stack its own.
    """

    family_name = "gd"
    roles = MappingProxyType({"weight_mean": ParameterRole.MEAN, "bias_mean": ParameterRole.MEAN})

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        std: float | torch.Tensor = INIT_STD,
        dtype: torch.dtype | None = None,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        self.weight_mean = nn.Parameter(self.initial_mean(dtype))
        dtype = self.weight_mean.dtype
        fixed = torch.as_tensor(std, dtype=dtype).expand(self.num_models).clone()
        if not bool((fixed > 0).all()):
            raise ValueError(f"FixedVariance: std must be > 0, got {std}")
        self.register_buffer("std", fixed)  # (M,): one fixed std per model
        self.bias_mean = nn.Parameter(self.zeros_bias(dtype)) if self.has_bias else None

    def _std_like(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.std.view(-1, *[1] * (tensor.dim() - 1)).expand_as(tensor)

    def weight_moments(self) -> Moments:
        return self.weight_mean, self._std_like(self.weight_mean) ** 2

    def bias_moments(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if self.bias_mean is None:
            return None, None
        return self.bias_mean, self._std_like(self.bias_mean) ** 2

    def sample(self, noise: NoiseSource) -> tuple[torch.Tensor, torch.Tensor | None]:
        mean = self.weight_mean
        eps = noise.randn(*mean.shape[1:], dtype=mean.dtype, device=mean.device)
        weight = mean + self._std_like(mean) * eps
        if self.bias_mean is None:
            return weight, None
        eps_bias = noise.randn(self.out_features, dtype=mean.dtype, device=mean.device)
        return weight, self.bias_mean + self._std_like(self.bias_mean) * eps_bias

    def local_reparameterization(self, x: torch.Tensor, noise: NoiseSource) -> torch.Tensor:
        if self.operator.is_conv or self.bias_mean is None or self.masked:
            return super().local_reparameterization(x, noise)
        mean = self.operator.apply(x, self.weight_mean, self.bias_mean)
        scale = self.std.view(-1, 1, 1) * torch.sqrt(1.0 + (x * x).sum(-1, keepdim=True))
        eps = noise.randn(x.shape[1], self.out_features, dtype=x.dtype, device=x.device)
        return torch.addcmul(mean, scale, eps)

    def kl(self, prior: Prior) -> torch.Tensor:
        # sigma of shape (M, 1, ..., 1): a prior that sums over the distinct sigmas (the Gaussian
        # one) then touches only the means elementwise
        total = kl_divergence(
            DiagonalGaussian(self.weight_mean, self._std_shape_of(self.weight_mean)), prior
        )
        if self.bias_mean is not None:
            bias = DiagonalGaussian(self.bias_mean, self._std_shape_of(self.bias_mean))
            total = total + kl_divergence(bias, prior)
        return total

    def _std_shape_of(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.std.view(-1, *[1] * (tensor.dim() - 1))

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        bias = self.posterior_mean()[1]
        bias_std = torch.zeros_like(bias) if self.bias_mean is None else self._std_like(bias)
        return self._std_like(self.weight_mean), bias_std
