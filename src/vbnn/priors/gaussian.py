"""The factorised Gaussian prior N(0, s^2) and its KL to every Gaussian and uniform posterior.

Its KLs are entries of the table of ``priors.kl``: the diagonal Gaussian (Blundell et al. 2015),
in log std for the mean-field layer, the correlated Gaussian through tr(Sigma) and log det(Sigma)
(full-covariance and low-rank families), and the scaled uniform of the uniform variance layer.
"""

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
from vbnn.priors.kl import (
    CorrelatedGaussian,
    DiagonalGaussian,
    LogStdGaussian,
    ScaledUniform,
    register_kl,
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

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        log_density = gaussian_log_prob(value, 0.0, per_model(self.std, value))
        return log_density.reshape(value.shape[0], -1).sum(1)


@register_kl(DiagonalGaussian, GaussianPrior)
def _kl_diagonal(q: DiagonalGaussian, p: GaussianPrior) -> torch.Tensor:
    return kl_diagonal_gaussian(q.mean, q.std, per_model(p.std, q.mean))


@register_kl(LogStdGaussian, GaussianPrior)
def _kl_log_std(q: LogStdGaussian, p: GaussianPrior) -> torch.Tensor:
    """The diagonal KL computed in log space, every (mean, log std) pair in one call
    (``kl_diagonal_gaussian_log_std``)."""
    (mean, log_std), *more = q.pairs
    rest = [tensor for pair in more for tensor in pair]
    return kl_diagonal_gaussian_log_std(mean, log_std, per_model(p.std, mean), *rest)


@register_kl(CorrelatedGaussian, GaussianPrior)
def _kl_correlated(q: CorrelatedGaussian, p: GaussianPrior) -> torch.Tensor:
    prior_std = per_model(p.std, q.mean[:, 0])  # (M,): one value per model's KL
    return kl_to_isotropic_gaussian(q.mean, q.trace, q.log_det, prior_std)


@register_kl(ScaledUniform, GaussianPrior)
def _kl_uniform(q: ScaledUniform, p: GaussianPrior) -> torch.Tensor:
    """KL(U(-theta, theta) || N(0, s^2)) per model, (M,), from log theta (M, ...):

        -log(2 theta) + 1/2 log(2 pi s^2) + theta^2 / (6 s^2)

    (E_q log q = -log(2 theta) and E_q w^2 = theta^2 / 3; Neklyudov et al. 2019 section 3.3)."""
    log_scale = q.log_scale
    variance = per_model(p.std, log_scale) ** 2
    terms = (
        -(math.log(2.0) + log_scale)
        + 0.5 * torch.log(2.0 * math.pi * torch.as_tensor(variance, dtype=log_scale.dtype))
        + torch.exp(2.0 * log_scale) / (6.0 * variance)
    )
    return terms.reshape(log_scale.shape[0], -1).sum(1)
