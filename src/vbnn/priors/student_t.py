"""The Student-t prior with nu degrees of freedom and its KL to Gaussian and uniform posteriors.

For w = mu + sigma eps (Neklyudov et al. 2018 eq. 25, Neklyudov et al. 2019 eq. 10):

    KL = -1/2 log(2e) - log sigma - lgamma((nu+1)/2) + 1/2 log nu + lgamma(nu/2)
         + (nu+1)/2 E log(nu + w^2) - (nu+1)/2 log nu,

estimated with one Monte Carlo sample of eps per weight (the papers use nu = 1e-16), drawn from
the prior's own generator, seeded by its ``seed`` field (as the log-uniform prior's one-sample
estimate, ``priors.log_uniform``). Every Gaussian posterior reaches it through the diagonal
Gaussian (``priors.kl``); the scaled uniform has a closed form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from vbnn.priors.kl import (
    DiagonalGaussian,
    DropoutGaussian,
    ScaledUniform,
    register_kl,
    sum_per_model,
)


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


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


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

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        nu = torch.tensor(self.nu, dtype=value.dtype, device=value.device)
        dist = torch.distributions.StudentT(nu)
        return sum_per_model(dist.log_prob(value))


@register_kl(DiagonalGaussian, StudentTPrior)
def _kl_diagonal(q: DiagonalGaussian, p: StudentTPrior) -> torch.Tensor:
    mean, std = torch.broadcast_tensors(q.mean, q.std)
    eps = torch.randn(mean.shape, generator=p.generator, dtype=mean.dtype).to(mean.device)
    return sum_per_model(kl_student_t_one_sample(mean, std, p.nu, eps))


@register_kl(DropoutGaussian, StudentTPrior)
def _kl_dropout(q: DropoutGaussian, p: StudentTPrior) -> torch.Tensor:
    """Through the diagonal Gaussian of std sqrt(alpha) |mean|: an entry of its own, so a layer
    that offers both forms (the additive parameterization) takes this one, through alpha."""
    return _kl_diagonal(DiagonalGaussian(q.mean, torch.exp(0.5 * q.log_alpha) * q.mean.abs()), p)


@register_kl(ScaledUniform, StudentTPrior)
def _kl_uniform(q: ScaledUniform, p: StudentTPrior) -> torch.Tensor:
    """KL(U(-theta, theta) || t_nu) per model, (M,), from log theta (M, ...), in closed form:

        -log(2 theta) - log c_nu + (nu + 1)/2 E log(1 + w^2 / nu),
        E log(1 + w^2 / nu) = log(1 + theta^2 / nu) - 2 + 2 (r / theta) atan(theta / r),

    where r = sqrt(nu) and c_nu = Gamma((nu + 1)/2) / (Gamma(nu/2) sqrt(nu pi)) is the
    density's constant. It depends on theta for every nu > 0; as nu -> 0 (the papers'
    1e-16) the dependence vanishes, as for the log-uniform prior."""
    log_scale = q.log_scale
    theta = log_scale.exp()
    root = math.sqrt(p.nu)
    expected = (
        torch.log1p((theta / root) ** 2) - 2.0 + 2.0 * (root / theta) * torch.atan(theta / root)
    )
    log_constant = (
        math.lgamma((p.nu + 1.0) / 2.0) - math.lgamma(p.nu / 2.0) - 0.5 * math.log(p.nu * math.pi)
    )
    terms = -(math.log(2.0) + log_scale) - log_constant + 0.5 * (p.nu + 1.0) * expected
    return sum_per_model(terms)
