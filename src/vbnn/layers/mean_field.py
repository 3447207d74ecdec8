"""MF: factorised Gaussian over weights and biases with learned variances (Blundell et al. 2015).

q(W_ij) = N(mu_ij, sigma_ij^2), and likewise for every bias. Two parameterizations of sigma:

* ``"log"`` (default): sigma = exp(rho). The KL's log sigma term is exact and Adam moves sigma on a
  relative scale (Trippe & Turner 2017 appendix A initialises sigma to 1e-4).
* ``"softplus"``: sigma = softplus(rho), as in Blundell et al. 2015 and Farquhar et al. 2020
  (appendix B: sigma initialised to 1e-6, He-normal means).

Dense layers with the log parameterization run the LRT through a fused kernel with a hand-written
backward (``vbnn.core.kernels.local_reparameterization_sample``); every other case uses the
shell's LRT, which computes the same quantity.
"""

from __future__ import annotations

import math
from enum import Enum
from types import MappingProxyType
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.contracts import ParameterRole, Prior
from vbnn.core.defaults import INIT_STD
from vbnn.core.kernels import local_reparameterization_sample
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.gaussian_weights import GaussianWeights
from vbnn.layers.shell import Moments, VariationalLayer
from vbnn.priors.kl import DiagonalGaussian, LogStdGaussian, kl_divergence


class StdParameterization(str, Enum):
    LOG = "log"
    SOFTPLUS = "softplus"


class Initialization(str, Enum):
    LECUN = "lecun"  # N(0, 1 / fan_in)
    HE = "he"  # N(0, 2 / fan_in)


def softplus_inverse(value: float | torch.Tensor) -> float | torch.Tensor:
    """rho with softplus(rho) = value (log(expm1(value)), exact for small values)."""
    if isinstance(value, torch.Tensor):
        return torch.log(torch.expm1(value))
    return math.log(math.expm1(value))


class MeanField(VariationalLayer):
    """q(W, b) = prod N(mu, sigma^2); LRT in LOCAL mode; dense, or a convolution (``kernel_size``).

    Args:
        in_features: as ``VariationalLayer``.
        out_features: as ``VariationalLayer``.
        generators: as ``VariationalLayer``.
        init_std: the marginal posterior std sigma of every weight and bias at initialisation;
            a (M,) tensor gives each model of a stack its own.
        dtype: parameter dtype (None: torch's default).
        parameterization: "log" (sigma = exp(rho)) or "softplus" (sigma = softplus(rho)).
        init: initial means "lecun" (N(0, 1/fan_in)) or "he" (N(0, 2/fan_in)); biases start at 0.
        **shell: kernel_size, stride, padding, dilation, bias, num_models (``VariationalLayer``).
    """

    family_name = "mf"
    roles = MappingProxyType({"weight_mean": ParameterRole.MEAN, "bias_mean": ParameterRole.MEAN})

    # Parameters: the layer's shape, then the family's hyper-parameters, each an independent option
    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        init_std: float | torch.Tensor = INIT_STD,
        dtype: torch.dtype | None = None,
        *,
        parameterization: StdParameterization | str = StdParameterization.LOG,
        init: Initialization | str = Initialization.LECUN,
        **shell: Any,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        self.parameterization = StdParameterization(parameterization)
        gain = 2.0 if Initialization(init) is Initialization.HE else 1.0
        self.weight_mean = nn.Parameter(self.initial_mean(dtype, gain))
        dtype = self.weight_mean.dtype
        std = torch.as_tensor(init_std, dtype=dtype)
        if not bool((std > 0).all()):
            raise ValueError(f"MeanField: init_std must be > 0, got {init_std}")
        log = self.parameterization is StdParameterization.LOG
        start = (torch.log(std) if log else softplus_inverse(std)).expand(self.num_models)
        name = "log_std" if self.parameterization is StdParameterization.LOG else "rho"
        weight_start = start.view(-1, *[1] * (self.weight_mean.dim() - 1))
        weight_raw = nn.Parameter(weight_start.expand_as(self.weight_mean).clone())
        setattr(self, f"weight_{name}", weight_raw)
        self.bias_mean = nn.Parameter(self.zeros_bias(dtype)) if self.has_bias else None
        bias_start = start.view(-1, 1).expand(self.num_models, out_features).clone()
        setattr(self, f"bias_{name}", nn.Parameter(bias_start) if self.has_bias else None)

    def _std(self, raw: torch.Tensor) -> torch.Tensor:
        if self.parameterization is StdParameterization.LOG:
            return raw.exp()
        return functional.softplus(raw)

    def _raw(self, part: str) -> torch.Tensor | None:
        suffix = "log_std" if self.parameterization is StdParameterization.LOG else "rho"
        return getattr(self, f"{part}_{suffix}")

    def weight_std(self) -> torch.Tensor:
        return self._std(self._raw("weight"))

    def weight_moments(self) -> Moments:
        return self.weight_mean, self.weight_std() ** 2

    def bias_moments(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if self.bias_mean is None:
            return None, None
        return self.bias_mean, self.bias_std() ** 2

    def sample(self, noise: NoiseSource) -> tuple[torch.Tensor, torch.Tensor | None]:
        mean, device = self.weight_mean, self.weight_mean.device
        if self.operator.is_conv or self.bias_mean is None:
            eps = noise.randn(*mean.shape[1:], dtype=mean.dtype, device=device)
            weight = mean + self.weight_std() * eps
            if self.bias_mean is None:
                return weight, None
            eps_bias = noise.randn(self.out_features, dtype=mean.dtype, device=device)
            return weight, self.bias_mean + self.bias_std() * eps_bias
        # dense with a bias: one (I + 1, O) block, weights then the bias row
        eps = noise.randn(self.in_features + 1, self.out_features, dtype=mean.dtype, device=device)
        weight = mean + self.weight_std() * eps[:, :-1]
        return weight, self.bias_mean + self.bias_std() * eps[:, -1]

    def local_reparameterization(self, x: torch.Tensor, noise: NoiseSource) -> torch.Tensor:
        fused = (
            not self.operator.is_conv
            and self.bias_mean is not None
            and self.parameterization is StdParameterization.LOG
            and not self.masked
        )
        if not fused:
            return super().local_reparameterization(x, noise)
        eps = noise.randn(x.shape[1], self.out_features, dtype=x.dtype, device=x.device)
        return local_reparameterization_sample(
            x, self.weight_mean, self.weight_log_std, self.bias_mean, self.bias_log_std, eps
        )

    def bias_std(self) -> torch.Tensor | None:
        raw = self._raw("bias")
        return None if raw is None else self._std(raw)

    def kl(self, prior: Prior) -> torch.Tensor:
        if self.parameterization is StdParameterization.LOG:
            # log sigma is the parameter: a prior with a log-space KL needs no exp/log round trip
            pairs = [(self.weight_mean, self.weight_log_std)]
            if self.bias_mean is not None:
                pairs.append((self.bias_mean, self.bias_log_std))
            return kl_divergence(LogStdGaussian(tuple(pairs)), prior)
        total = kl_divergence(DiagonalGaussian(self.weight_mean, self.weight_std()), prior)
        if self.bias_mean is not None:
            total = total + kl_divergence(DiagonalGaussian(self.bias_mean, self.bias_std()), prior)
        return total

    def gaussian_weights(self) -> tuple[GaussianWeights, ...]:
        if self.parameterization is StdParameterization.LOG:
            maps = (torch.exp, torch.log, torch.exp)
        else:
            maps = (functional.softplus, softplus_inverse, torch.sigmoid)
        parts = [("weight", self.weight_mean, self._raw("weight"))]
        if self.bias_mean is not None:
            parts.append(("bias", self.bias_mean, self._raw("bias")))
        return tuple(GaussianWeights(name, mean, raw, *maps) for name, mean, raw in parts)

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        bias_std = self.bias_std()
        if bias_std is None:
            bias_std = torch.zeros_like(self.posterior_mean()[1])
        return self.weight_std(), bias_std
