"""Priors of the variance-networks papers and their KL to Gaussian-dropout posteriors.

Posterior q(w) = N(mu, alpha mu^2) (variational dropout), or N(0, sigma^2) (zero-mean layer).
Sources: Neklyudov et al. 2018 eqs. 9-10 and appendices B-C; Neklyudov et al. 2019 eqs. 6-11
and appendix F.

Normalisation of the improper log-uniform prior p(w) ~ 1/|w|. Up to an additive constant,

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

ARD (Neklyudov et al. 2019 eq. 11): with the optimal prior variance lambda^2 = (alpha + 1) mu^2,
KL(N(mu, alpha mu^2) || N(0, lambda^2)) = 1/2 log(1 + 1/alpha). The paper prints log(1 + 1/alpha)
without the 1/2; the Gaussian KL formula gives 1/2 (tested against torch.distributions).

Student-t with nu degrees of freedom (Neklyudov et al. 2018 eq. 25, Neklyudov et al. 2019 eq. 10), w
= mu + sigma eps:

    KL = -1/2 log(2e) - log sigma - lgamma((nu+1)/2) + 1/2 log nu + lgamma(nu/2)
         + (nu+1)/2 E log(nu + w^2) - (nu+1)/2 log nu,

estimated with one Monte Carlo sample of eps per weight (the papers use nu = 1e-16).

The one-sample estimates (``LogUniformPrior`` with ``KLEstimator.ONE_SAMPLE``, ``StudentTPrior``)
are the one noise source outside the layers' rule (a call's ``noise``, else the ``use_noise``
source, else torch's global RNG): the ``Prior`` contract passes no noise to its KLs, so each
prior draws eps from a ``torch.Generator`` of its own, made from its ``seed`` field when it is
built (the generator is not a constructor argument). A prior's estimates are the same for the
same seed and sequence of calls. One block is drawn for the whole stack, so a model's estimate
depends on the stack it is in.
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

from vbnn.core.contracts import DropoutPrior

K1, K2, K3 = 0.63576, 1.87320, 1.48695
# C = -E log|eps| for eps ~ N(0, 1): E log|eps| = -(euler_gamma + log 2) / 2.
EULER_GAMMA = 0.5772156649015329
LOG_UNIFORM_CONSTANT = 0.5 * (EULER_GAMMA + math.log(2.0))


def _sum_per_model(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1).sum(dim=1)


def _sum_shared(values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Per-model sum of ``values`` (one per alpha) broadcast to the weights' ``shape``, without
    materialising the broadcast: each value counts once per weight sharing it (a layer-wise
    alpha of LeNet-5's dense1 is one value for 400,000 weights). Equal to
    ``_sum_per_model(broadcast_to(values, shape))`` up to float rounding."""
    if values.dim() != len(shape) or values.shape[0] != shape[0]:
        return _sum_per_model(torch.broadcast_to(values, shape))
    return _sum_per_model(values) * (math.prod(shape) // values.numel())


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
        return _sum_per_model(kl)

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


def kl_ard(log_alpha: torch.Tensor) -> torch.Tensor:
    """Elementwise KL(N(mu, alpha mu^2) || N(0, (alpha + 1) mu^2)) = 1/2 log(1 + 1/alpha)."""
    return 0.5 * functional.softplus(-log_alpha)


def kl_student_t_one_sample(
    mean: torch.Tensor, std: torch.Tensor, nu: float, eps: torch.Tensor
) -> torch.Tensor:
    """Elementwise one-sample estimate of KL(N(mean, std^2) || Student-t(nu)) (Neklyudov et al. 2018
    eq. 25)."""
    log_nu = math.log(nu)
    constant = (
        -0.5 * math.log(2.0 * math.e)
        - math.lgamma(0.5 * (nu + 1.0))
        + 0.5 * log_nu
        + math.lgamma(0.5 * nu)
        - 0.5 * (nu + 1.0) * log_nu
    )
    weight = mean + std * eps
    return constant - torch.log(std) + 0.5 * (nu + 1.0) * torch.log(nu + weight * weight)


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

    def kl_dropout(self, mean: torch.Tensor, log_alpha: torch.Tensor) -> torch.Tensor:
        if self.estimator is KLEstimator.APPROXIMATION:
            if log_alpha.shape == mean.shape:  # one alpha per weight
                return _LogUniformApproximationSum.apply(log_alpha)
            return _sum_shared(kl_log_uniform_approximation(log_alpha), mean.shape)
        log_alpha = torch.broadcast_to(log_alpha, mean.shape)
        eps = torch.randn(mean.shape, generator=self.generator, dtype=mean.dtype).to(mean.device)
        return _sum_per_model(kl_log_uniform_one_sample(log_alpha, eps))

    def kl_zero_mean(self, std: torch.Tensor) -> torch.Tensor:
        """Constant in sigma (Neklyudov et al. 2019 appendix F); 0 under this normalisation."""
        return std.new_zeros(std.shape[0])

    def kl_uniform(self, log_scale: torch.Tensor) -> torch.Tensor:
        """KL(U(-theta, theta) || LogU) = -log(2 theta) + E log|theta u| + C = -log 2 - 1 + C:
        constant in theta, dropped (0), as for the zero-mean layer."""
        return log_scale.new_zeros(log_scale.shape[0])

    def kl_diagonal(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """For N(mean, std^2): alpha = std^2 / mean^2."""
        return self.kl_dropout(mean, 2.0 * (torch.log(std) - torch.log(torch.abs(mean))))

    def kl_correlated(self, mean, trace, log_det) -> torch.Tensor:
        raise TypeError("LogUniformPrior has no KL for correlated Gaussians")

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Unnormalised log density -log|w|, summed per model."""
        return _sum_per_model(-torch.log(torch.abs(value)))


@dataclass(frozen=True)
class StudentTPrior:
    """Student-t prior with ``nu`` degrees of freedom; KL by one-sample Monte Carlo (Neklyudov et
    al. 2019 eq. 10).

    Args:
        nu: the degrees of freedom, > 0.
        seed: seeds the prior's own generator, that of the one-sample estimate (module
            docstring).
    """

    scale_invariant: ClassVar[bool] = False

    nu: float = 1e-16
    seed: int = 0
    generator: torch.Generator = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.nu > 0:
            raise ValueError(f"StudentTPrior: nu must be > 0, got {self.nu!r}")
        object.__setattr__(self, "generator", _generator(self.seed))

    def kl_diagonal(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        mean, std = torch.broadcast_tensors(mean, std)
        eps = torch.randn(mean.shape, generator=self.generator, dtype=mean.dtype).to(mean.device)
        return _sum_per_model(kl_student_t_one_sample(mean, std, self.nu, eps))

    def kl_dropout(self, mean: torch.Tensor, log_alpha: torch.Tensor) -> torch.Tensor:
        return self.kl_diagonal(mean, torch.exp(0.5 * log_alpha) * torch.abs(mean))

    def kl_zero_mean(self, std: torch.Tensor) -> torch.Tensor:
        return self.kl_diagonal(torch.zeros_like(std), std)

    def kl_uniform(self, log_scale: torch.Tensor) -> torch.Tensor:
        """KL(U(-theta, theta) || t_nu) per model, (M,), from log theta (M, ...), in closed form:

            -log(2 theta) - log c_nu + (nu + 1)/2 E log(1 + w^2 / nu),
            E log(1 + w^2 / nu) = log(1 + theta^2 / nu) - 2 + 2 (r / theta) atan(theta / r),

        where r = sqrt(nu) and c_nu = Gamma((nu + 1)/2) / (Gamma(nu/2) sqrt(nu pi)) is the
        density's constant. It depends on theta for every nu > 0; as nu -> 0 (the papers'
        1e-16) the dependence vanishes, as for the log-uniform prior."""
        theta = log_scale.exp()
        root = math.sqrt(self.nu)
        expected = (
            torch.log1p((theta / root) ** 2) - 2.0 + 2.0 * (root / theta) * torch.atan(theta / root)
        )
        log_constant = (
            math.lgamma((self.nu + 1.0) / 2.0)
            - math.lgamma(self.nu / 2.0)
            - 0.5 * math.log(self.nu * math.pi)
        )
        terms = -(math.log(2.0) + log_scale) - log_constant + 0.5 * (self.nu + 1.0) * expected
        return _sum_per_model(terms)

    def kl_correlated(self, mean, trace, log_det) -> torch.Tensor:
        raise TypeError("StudentTPrior has no KL for correlated Gaussians")

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        nu = torch.tensor(self.nu, dtype=value.dtype, device=value.device)
        dist = torch.distributions.StudentT(nu)
        return _sum_per_model(dist.log_prob(value))


@dataclass(frozen=True)
class ARDPrior:
    """Automatic relevance determination N(0, lambda^2), lambda^2 at its optimum (Neklyudov et al.
    2019 eq. 11)."""

    def kl_dropout(self, mean: torch.Tensor, log_alpha: torch.Tensor) -> torch.Tensor:
        return _sum_shared(kl_ard(log_alpha), mean.shape)

    scale_invariant: ClassVar[bool] = True  # its variance follows the posterior's scale

    def kl_zero_mean(self, std: torch.Tensor) -> torch.Tensor:
        """The optimal prior equals q: KL = 0."""
        return std.new_zeros(std.shape[0])

    def kl_uniform(self, log_scale: torch.Tensor) -> torch.Tensor:
        """With the optimal lambda^2 = theta^2 / 3, KL(U(-theta, theta) || N(0, lambda^2)) =
        1/2 log(2 pi / 3) + 1/2 - log 2: constant in theta, dropped (0)."""
        return log_scale.new_zeros(log_scale.shape[0])

    def kl_diagonal(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Optimal lambda^2 = mean^2 + std^2: KL = 1/2 log(1 + mean^2 / std^2)."""
        return _sum_per_model(0.5 * torch.log1p((mean / std) ** 2))

    def kl_correlated(self, mean, trace, log_det) -> torch.Tensor:
        raise TypeError("ARDPrior has no KL for correlated Gaussians")

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        raise TypeError("ARDPrior's variance is set by the posterior: it has no fixed density")


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


def dropout_kl(prior: object, mean: torch.Tensor, log_alpha: torch.Tensor) -> torch.Tensor:
    """KL of N(mean, alpha mean^2) to ``prior``, (M,): ``kl_dropout`` if the prior has it, else
    the prior's ``kl_diagonal`` with std = sqrt(alpha) |mean| (e.g. a Gaussian prior)."""
    if isinstance(prior, DropoutPrior):
        return prior.kl_dropout(mean, log_alpha)
    std = torch.exp(0.5 * log_alpha) * mean.abs()
    return prior.kl_diagonal(mean, torch.broadcast_to(std, mean.shape))


def zero_mean_kl(prior: object, std: torch.Tensor) -> torch.Tensor:
    """KL of N(0, std^2) to ``prior``, (M,) (Neklyudov et al. 2019 appendix F: constant for
    log-uniform / ARD)."""
    if isinstance(prior, DropoutPrior):
        return prior.kl_zero_mean(std)
    return prior.kl_diagonal(torch.zeros_like(std), std)
