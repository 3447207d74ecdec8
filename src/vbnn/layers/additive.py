"""Additive parameterization: q(w) = N(mu, sigma^2) with the dropout priors (Neklyudov et al. 2019
eq. 14).

Same distribution as mean-field Gaussian, but its KL to the log-uniform / Student-t / ARD priors is
taken through alpha = sigma^2 / mu^2 (log alpha clipped to ``LOG_ALPHA_RANGE``), as in sparse
variational dropout (Molchanov et al. 2017). The additive and the weight-wise parameterizations
describe the same set of posteriors; they differ only in the optimisation variables (mu, log sigma)
vs (mu, log alpha). LRT as in Neklyudov et al. 2019 appendix E. Biases are point parameters
(optional).
"""

from __future__ import annotations

import math
from types import MappingProxyType

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from vbnn.core.contracts import ParameterRole
from vbnn.core.kernels import clamp_derivative, variance_from_log_std
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import LOG_ALPHA_RANGE, VariationalLayer
from vbnn.priors.kl import DiagonalGaussian, DropoutGaussian, has_kl, kl_divergence
from vbnn.priors.log_uniform import LogUniformPrior

MEAN_SQUARED_FLOOR = 1e-8
DEFAULT_RELATIVE_STD = 0.1  # initial sigma = this times 1/sqrt(fan_in) when init_std is None


class _ClippedLogAlpha(torch.autograd.Function):
    """log alpha = clip(2 log sigma - log(mu^2 + floor)) with its derivatives written out, since
    a training step takes it over every weight:

        dlog alpha/dlog sigma = 2,     dlog alpha/dmu = -2 mu / (mu^2 + floor),

    both 0 where the clip is active (``LOG_ALPHA_RANGE``)."""

    @staticmethod
    def forward(ctx, mean, log_std):  # type: ignore[no-untyped-def]
        denominator = torch.mul(mean, mean).add_(MEAN_SQUARED_FLOOR)
        log_alpha = torch.log(denominator).neg_().add_(log_std, alpha=2.0)
        ctx.save_for_backward(mean, denominator, log_alpha)
        return log_alpha.clamp(*LOG_ALPHA_RANGE)

    @staticmethod
    @once_differentiable  # no second derivatives
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        mean, denominator, log_alpha = ctx.saved_tensors
        twice = clamp_derivative(grad, log_alpha, *LOG_ALPHA_RANGE).mul_(2.0)
        grad_mean = torch.mul(twice, mean).div_(denominator).neg_()
        return grad_mean, twice


class Additive(VariationalLayer):
    """N(mu, sigma^2) weights; dense, or a convolution when ``kernel_size`` is set.

    The other arguments are those of ``VariationalDropout``.

    Args:
        init_std: the marginal posterior std sigma of every weight at initialisation
            (None: 0.1 / sqrt(fan_in)).
    """

    family_name = "additive"
    roles = MappingProxyType({"weight_mean": ParameterRole.MEAN, "bias": ParameterRole.MEAN})
    default_prior: object = LogUniformPrior()

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        init_std: float | None = None,
        dtype: torch.dtype | None = None,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        if init_std is not None and not init_std > 0:
            raise ValueError(f"Additive: init_std must be > 0, got {init_std}")
        self.point_bias(dtype)
        self.weight_mean = nn.Parameter(self.initial_mean(dtype))
        if init_std is None:
            init_std = DEFAULT_RELATIVE_STD / math.sqrt(self.operator.fan_in())
        self.weight_log_std = nn.Parameter(torch.full_like(self.weight_mean, math.log(init_std)))

    def weight_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_mean, variance_from_log_std(self.weight_log_std)

    def sample_weight(self, noise: NoiseSource) -> torch.Tensor:
        mean = self.weight_mean
        eps = noise.randn(*mean.shape[1:], dtype=mean.dtype, device=mean.device)
        return mean + self.weight_log_std.exp() * eps

    def clipped_log_alpha(self) -> torch.Tensor:
        """log alpha = 2 log sigma - log(mu^2 + 1e-8), clipped.

        The 1e-8 (as in Molchanov et al.'s sparse variational dropout code) keeps the log finite
        when the KL drives mu to 0 and mu^2 underflows in float32.
        """
        return _ClippedLogAlpha.apply(self.weight_mean, self.weight_log_std)

    def kl(self, prior: object) -> torch.Tensor:
        """Dropout priors: through alpha; other priors (Gaussian): their diagonal KL. (M,)."""
        if has_kl(DropoutGaussian, prior):
            return kl_divergence(DropoutGaussian(self.weight_mean, self.clipped_log_alpha()), prior)
        return kl_divergence(DiagonalGaussian(self.weight_mean, self.weight_log_std.exp()), prior)

    def mean_log_alpha(self) -> torch.Tensor:
        return self.clipped_log_alpha().detach().reshape(self.num_models, -1).mean(1)
