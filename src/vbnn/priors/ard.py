"""Automatic relevance determination: N(0, lambda^2) with lambda^2 at its optimum for q.

Neklyudov et al. 2019 eq. 11: with the optimal prior variance lambda^2 = (alpha + 1) mu^2,
KL(N(mu, alpha mu^2) || N(0, lambda^2)) = 1/2 log(1 + 1/alpha). The paper prints
log(1 + 1/alpha) without the 1/2; the Gaussian KL formula gives 1/2 (tested against
torch.distributions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
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


def kl_ard(log_alpha: torch.Tensor) -> torch.Tensor:
    """Elementwise KL(N(mu, alpha mu^2) || N(0, (alpha + 1) mu^2)) = 1/2 log(1 + 1/alpha)."""
    return 0.5 * functional.softplus(-log_alpha)


@dataclass(frozen=True)
class ARDPrior:
    """Automatic relevance determination N(0, lambda^2), lambda^2 at its optimum (Neklyudov et al.
    2019 eq. 11)."""

    scale_invariant: ClassVar[bool] = True  # its variance follows the posterior's scale

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        raise TypeError("ARDPrior's variance is set by the posterior: it has no fixed density")


@register_kl(DropoutGaussian, ARDPrior)
def _kl_dropout(q: DropoutGaussian, p: ARDPrior) -> torch.Tensor:
    return sum_shared(kl_ard(q.log_alpha), q.mean.shape)


@register_kl(ZeroMeanGaussian, ARDPrior)
def _kl_zero_mean(q: ZeroMeanGaussian, p: ARDPrior) -> torch.Tensor:
    """The optimal prior equals q: KL = 0."""
    return q.std.new_zeros(q.std.shape[0])


@register_kl(ScaledUniform, ARDPrior)
def _kl_uniform(q: ScaledUniform, p: ARDPrior) -> torch.Tensor:
    """With the optimal lambda^2 = theta^2 / 3, KL(U(-theta, theta) || N(0, lambda^2)) =
    1/2 log(2 pi / 3) + 1/2 - log 2: constant in theta, dropped (0)."""
    return q.log_scale.new_zeros(q.log_scale.shape[0])


@register_kl(DiagonalGaussian, ARDPrior)
def _kl_diagonal(q: DiagonalGaussian, p: ARDPrior) -> torch.Tensor:
    """Optimal lambda^2 = mean^2 + std^2: KL = 1/2 log(1 + mean^2 / std^2)."""
    return sum_per_model(0.5 * torch.log1p((q.mean / q.std) ** 2))
