"""The KL of a (posterior, prior) pair, chosen by a registered table.

A family layer states its posterior as one of the forms below and asks ``kl_divergence(q, p)``
for KL(q || p); the formula is the function registered for the pair of types, as
``torch.distributions.kl_divergence`` chooses one. A new prior is one class and its
``register_kl`` lines; a layer never asks what type its prior is.

The forms (every tensor carries the leading model dimension M; each KL is summed over all but
it, shape (M,)):

    DiagonalGaussian(mean, std)             q(w) = N(mean, diag std^2)
    LogStdGaussian(pairs)                   the same for one or more (mean, log std) pairs
    DropoutGaussian(mean, log_alpha)        q(w) = N(mean, alpha mean^2), log alpha broadcastable
                                            to the means (Kingma et al. 2015)
    ZeroMeanGaussian(std)                   q(w) = N(0, std^2) (Neklyudov et al. 2019)
    ScaledUniform(log_scale)                q(w) = U(-theta, theta), theta = exp(log_scale)
    CorrelatedGaussian(mean, trace, log_det)
                                            q(w) = N(mean, Sigma), through tr(Sigma) and
                                            log det(Sigma): mean (M, D), trace and log_det (M,)

A pair with no entry of its own falls back along the form's ``fallback``: the first three
Gaussian forms are diagonal Gaussians (``LogStdGaussian`` with std = exp(log std),
``DropoutGaussian`` with std = sqrt(alpha) |mean|, ``ZeroMeanGaussian`` with mean 0), so a prior
that knows the diagonal Gaussian's KL serves every Gaussian family. Lookup follows each type's
method resolution order, so a subclass of a prior inherits its entries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

KLFunction = Callable[[Any, Any], torch.Tensor]
_TABLE: dict[tuple[type, type], KLFunction] = {}


@dataclass(frozen=True)
class DiagonalGaussian:
    """q(w) = N(mean, diag std^2); ``std`` broadcastable to ``mean``."""

    mean: torch.Tensor
    std: torch.Tensor

    def fallback(self) -> None:
        return None


@dataclass(frozen=True)
class LogStdGaussian:
    """Diagonal Gaussians over one or more tensors, each given as (mean, log std): one KL for a
    layer's weight and bias together, with no exp/log round trip where the prior's formula can
    use log std directly."""

    pairs: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    def fallback(self) -> list[DiagonalGaussian]:
        return [DiagonalGaussian(mean, log_std.exp()) for mean, log_std in self.pairs]


@dataclass(frozen=True)
class DropoutGaussian:
    """q(w) = N(mean, alpha mean^2), the variational-dropout posterior; ``log_alpha`` is one value
    per weight, per neuron or per layer, broadcastable to ``mean``."""

    mean: torch.Tensor
    log_alpha: torch.Tensor

    def fallback(self) -> list[DiagonalGaussian]:
        std = torch.exp(0.5 * self.log_alpha) * self.mean.abs()
        return [DiagonalGaussian(self.mean, torch.broadcast_to(std, self.mean.shape))]


@dataclass(frozen=True)
class ZeroMeanGaussian:
    """q(w) = N(0, std^2), the zero-mean variance layer's posterior."""

    std: torch.Tensor

    def fallback(self) -> list[DiagonalGaussian]:
        return [DiagonalGaussian(torch.zeros_like(self.std), self.std)]


@dataclass(frozen=True)
class ScaledUniform:
    """q(w) = U(-theta, theta) with theta = exp(log_scale)."""

    log_scale: torch.Tensor

    def fallback(self) -> None:
        return None


@dataclass(frozen=True)
class CorrelatedGaussian:
    """q(w) = N(mean, Sigma) given by its mean (M, D), tr(Sigma) (M,) and log det(Sigma) (M,)."""

    mean: torch.Tensor
    trace: torch.Tensor
    log_det: torch.Tensor

    def fallback(self) -> None:
        return None


def register_kl(posterior: type, prior: type) -> Callable[[KLFunction], KLFunction]:
    """Decorator: ``function(q, p)`` is KL(q || p) for a posterior form of type ``posterior`` and
    a prior of type ``prior``, summed per model, (M,).

    Example::

        @register_kl(DiagonalGaussian, MyPrior)
        def _kl_diagonal_my_prior(q, p):
            return ...
    """

    def add(function: KLFunction) -> KLFunction:
        _TABLE[(posterior, prior)] = function
        return function

    return add


def _lookup(posterior: type, prior: type) -> KLFunction | None:
    """The entry of the most specific registered pair: the prior's types first, then the
    posterior's, each in method resolution order."""
    for prior_type in prior.__mro__:
        for posterior_type in posterior.__mro__:
            function = _TABLE.get((posterior_type, prior_type))
            if function is not None:
                return function
    return None


def has_kl(posterior: type, prior: object) -> bool:
    """Whether the pair (``posterior``, type of ``prior``) has an entry of its own, before any
    fallback."""
    return _lookup(posterior, type(prior)) is not None


def kl_divergence(posterior: Any, prior: object) -> torch.Tensor:
    """KL(posterior || prior), (M,): the registered entry of the pair, else the sum over the
    posterior's fallback forms (module docstring).

    Raises:
        TypeError: no entry for the pair or for any fallback of it.
    """
    function = _lookup(type(posterior), type(prior))
    if function is not None:
        return function(posterior, prior)
    forms = posterior.fallback()
    if forms:
        total = kl_divergence(forms[0], prior)
        for form in forms[1:]:
            total = total + kl_divergence(form, prior)
        return total
    raise TypeError(
        f"no KL({type(posterior).__name__} || {type(prior).__name__}) is registered; add one "
        f"with vbnn.register_kl({type(posterior).__name__}, {type(prior).__name__})"
    )


def sum_per_model(values: torch.Tensor) -> torch.Tensor:
    """Sum over all but the leading model dimension, (M,)."""
    return values.reshape(values.shape[0], -1).sum(dim=1)


def sum_shared(values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Per-model sum of ``values`` (one per alpha) broadcast to the weights' ``shape``, without
    materialising the broadcast: each value counts once per weight sharing it (a layer-wise
    alpha of LeNet-5's dense1 is one value for 400,000 weights). Equal to
    ``sum_per_model(broadcast_to(values, shape))`` up to float rounding."""
    if values.dim() != len(shape) or values.shape[0] != shape[0]:
        return sum_per_model(torch.broadcast_to(values, shape))
    return sum_per_model(values) * (math.prod(shape) // values.numel())
