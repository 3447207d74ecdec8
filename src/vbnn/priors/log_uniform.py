"""The log-uniform prior p(w) ~ 1/|w| and its KL to the variational-dropout posterior.

Posterior q(w) = N(mu, alpha mu^2) (variational dropout), or N(0, sigma^2) (zero-mean layer).
Sources: Neklyudov et al. 2018 eqs. 9-10 and appendices B-C; Neklyudov et al. 2019 eqs. 6-8 and
appendix F.

Normalisation of the improper prior. Up to an additive constant,

    KL(N(mu, alpha mu^2) || LogU) = -1/2 log alpha + E_eps log|1 + sqrt(alpha) eps| + C  (Neklyudov
    et al. 2019 eq 8)
                                  = E_eps log|alpha^(-1/2) + eps| + C,

and we fix C = -E log|eps| = (euler_gamma + log 2) / 2 so that KL -> 0 as alpha -> infinity, the
convention of Molchanov et al. (2017) whose approximation (Neklyudov et al. 2018 eq. 10, sign
garbled in the text) is

    KL ~= k1 - k1 sigmoid(k2 + k3 log alpha) + 1/2 log(1 + 1/alpha),
    k1 = 0.63576, k2 = 1.87320, k3 = 1.48695.

With this convention the zero-mean layer's KL (the alpha -> infinity limit, Neklyudov et al. 2019
appendix F) is exactly 0 for every sigma.

The one-sample estimate (``KLEstimator.ONE_SAMPLE``) is, with the Student-t prior's, the one
noise source outside the layers' rule (a call's ``noise``, else the ``use_noise`` source, else
torch's global RNG): the KL table passes no noise, so the prior draws eps from a
``torch.Generator`` of its own, made from its ``seed`` field when it is built (the generator is
not a constructor argument). A prior's estimates are the same for the same seed and sequence of
calls. One block is drawn for the whole stack, so a model's estimate depends on the stack it is
in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from itertools import pairwise
from typing import ClassVar

import torch
from torch.autograd.function import once_differentiable
from torch.nn import functional

from vbnn.priors.kl import (
    DiagonalGaussian,
    DropoutGaussian,
    ScaledUniform,
    ZeroMeanGaussian,
    register_kl,
    sum_per_model,
    sum_shared,
)

K1, K2, K3 = 0.63576, 1.87320, 1.48695
# C = -E log|eps| for eps ~ N(0, 1): E log|eps| = -(euler_gamma + log 2) / 2.
EULER_GAMMA = 0.5772156649015329
LOG_UNIFORM_CONSTANT = 0.5 * (EULER_GAMMA + math.log(2.0))


def kl_log_uniform_approximation(log_alpha: torch.Tensor) -> torch.Tensor:
    """Elementwise Molchanov et al. approximation of KL(N(mu, alpha mu^2) || LogU) (Neklyudov et al.
    2018 eq. 10)."""
    return K1 - K1 * torch.sigmoid(K2 + K3 * log_alpha) + 0.5 * functional.softplus(-log_alpha)


class _LogUniformApproximationSum(torch.autograd.Function):
    """Per-model sum of ``kl_log_uniform_approximation`` with its derivative taken in the same
    pass (s = sigmoid(k2 + k3 log alpha), t = sigmoid(-log alpha) = 1 / (1 + alpha)):

        KL = k1 - k1 s + 1/2 log(1 + 1/alpha),       dKL/dlog alpha = -k1 k3 s (1 - s) - t / 2.

    The backward is one product with the saved derivative, where autograd would replay the
    sigmoid, the softplus and their products over every log alpha of a weight-wise layer."""

    @staticmethod
    def forward(ctx, log_alpha):  # type: ignore[no-untyped-def]
        s = torch.sigmoid(log_alpha.mul(K3).add_(K2))
        negative = torch.neg(log_alpha)
        kl = functional.softplus(negative).mul_(0.5).sub_(s, alpha=K1).add_(K1)
        t = negative.sigmoid_()
        derivative = torch.sub(1.0, s).mul_(s).mul_(-K1 * K3).sub_(t, alpha=0.5)
        ctx.save_for_backward(derivative)
        return sum_per_model(kl)

    @staticmethod
    @once_differentiable  # the saved derivative carries no graph: no second derivatives
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        (derivative,) = ctx.saved_tensors
        return derivative * grad.reshape(-1, *[1] * (derivative.dim() - 1))


def kl_log_uniform_one_sample(log_alpha: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """Elementwise unbiased one-sample estimate (Neklyudov et al. 2018 eq. 9): log|alpha^(-1/2) +
    eps| + C.

    -1/2 log alpha + log|1 + sqrt(alpha) eps| is rewritten as log|alpha^(-1/2) + eps| so that it
    stays finite for large alpha. ``eps`` ~ N(0, 1) has the shape of the broadcast result.
    """
    return torch.log(torch.abs(torch.exp(-0.5 * log_alpha) + eps)) + LOG_UNIFORM_CONSTANT


class KLEstimator(str, Enum):
    """How the log-uniform KL is computed."""

    APPROXIMATION = "approximation"  # Molchanov et al. sigmoid fit (Neklyudov et al. 2018 eq. 10)
    ONE_SAMPLE = "one-sample"  # unbiased Monte Carlo (Neklyudov et al. 2018 eq. 9)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


@dataclass(frozen=True)
class LogUniformPrior:
    """Symmetric log-uniform p(w) ~ 1/|w| (improper), KL normalised to 0 at alpha = infinity.

    Args:
        estimator: the sigmoid approximation or the one-sample estimate.
        seed: seeds the prior's own generator, that of the one-sample estimate (module
            docstring).
    """

    # KL(theta q0 || prior) of a scaled fixed q0 does not depend on theta (module docstring)
    scale_invariant: ClassVar[bool] = True

    estimator: KLEstimator = KLEstimator.APPROXIMATION
    seed: int = 0
    generator: torch.Generator = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "estimator", KLEstimator(self.estimator))
        object.__setattr__(self, "generator", _generator(self.seed))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Unnormalised log density -log|w|, summed per model."""
        return sum_per_model(-torch.log(torch.abs(value)))


def log_uniform_kl_by_quadrature(log_alpha: float) -> float:
    """True KL(N(mu, alpha mu^2) || LogU) under the normalisation above, by numerical integration.

    E_eps log|a + eps| with a = alpha^(-1/2), integrated with scipy.quad split at the log
    singularity eps = -a (the normal density outside [-12, 12] is below 1e-31 and is left out).
    Used by the tests and the report; needs scipy.
    """
    from scipy import integrate, stats

    a = math.exp(-0.5 * log_alpha)

    def integrand(eps: float) -> float:
        return math.log(abs(a + eps)) * stats.norm.pdf(eps)

    # the normal density beyond |eps| = 12 is below 1e-31: integrate on [-12, 12], split at -a
    cuts = [-12.0, *([-a] if a < 12.0 else []), 12.0]
    total = sum(integrate.quad(integrand, lo, hi, limit=200)[0] for lo, hi in pairwise(cuts))
    return total + LOG_UNIFORM_CONSTANT


@register_kl(DropoutGaussian, LogUniformPrior)
def _kl_dropout(q: DropoutGaussian, p: LogUniformPrior) -> torch.Tensor:
    mean, log_alpha = q.mean, q.log_alpha
    if p.estimator is KLEstimator.APPROXIMATION:
        if log_alpha.shape == mean.shape:  # one alpha per weight
            return _LogUniformApproximationSum.apply(log_alpha)
        return sum_shared(kl_log_uniform_approximation(log_alpha), mean.shape)
    log_alpha = torch.broadcast_to(log_alpha, mean.shape)
    eps = torch.randn(mean.shape, generator=p.generator, dtype=mean.dtype).to(mean.device)
    return sum_per_model(kl_log_uniform_one_sample(log_alpha, eps))


@register_kl(DiagonalGaussian, LogUniformPrior)
def _kl_diagonal(q: DiagonalGaussian, p: LogUniformPrior) -> torch.Tensor:
    """For N(mean, std^2): alpha = std^2 / mean^2."""
    log_alpha = 2.0 * (torch.log(q.std) - torch.log(torch.abs(q.mean)))
    return _kl_dropout(DropoutGaussian(q.mean, log_alpha), p)


@register_kl(ZeroMeanGaussian, LogUniformPrior)
def _kl_zero_mean(q: ZeroMeanGaussian, p: LogUniformPrior) -> torch.Tensor:
    """Constant in sigma (Neklyudov et al. 2019 appendix F); 0 under this normalisation."""
    return q.std.new_zeros(q.std.shape[0])


@register_kl(ScaledUniform, LogUniformPrior)
def _kl_uniform(q: ScaledUniform, p: LogUniformPrior) -> torch.Tensor:
    """KL(U(-theta, theta) || LogU) = -log(2 theta) + E log|theta u| + C = -log 2 - 1 + C:
    constant in theta, dropped (0), as for the zero-mean layer."""
    return q.log_scale.new_zeros(q.log_scale.shape[0])
