"""Likelihoods p(y | f(x)): one contract, ``log_prob(prediction, target) -> per-example values``.

Every likelihood returns log p(y_n | f(x_n)) for each example, shaped like the target without its
event dimensions: (N,) for one network, (M, N) for a stack of M. The ELBO (``objectives.elbo``)
sums over the last dimension and scales to the data-set size.

* ``GaussianLikelihood``: y ~ N(f(x), sigma^2), sigma learned (stored as log sigma) or fixed;
  prediction (..., N, 1), target (..., N). One sigma per model.
* ``HeteroscedasticGaussianLikelihood``: y ~ N(mu(x), sigma(x)^2), the network's two outputs
  (mean, log std); prediction (..., N, 2), target (..., N). No parameters of its own.
* ``CategoricalLikelihood``: t ~ Cat(softmax(f(x))); logits (..., N, C), labels (..., N) or (N,),
  integers or floats holding whole numbers (as a table read from a file gives them).
* ``BernoulliLikelihood``: t ~ Bernoulli(sigmoid(f(x))); logits (..., N) or (..., N, 1),
  labels in {0, 1} (..., N) or (N,).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.gaussian import gaussian_log_prob


def first_position(bad: torch.Tensor) -> str:
    """The index of the first True entry of ``bad``, as ``[i, j, ...]``."""
    return str([int(i) for i in bad.nonzero()[0]])


_INPUTS_CHECKED: ContextVar[bool] = ContextVar("inputs_checked", default=False)


def checking() -> bool:
    """Whether the input checks run: always, except inside a compiled graph, which cannot branch
    on data (a compiled step's inputs were checked by its eager first step), and inside
    ``inputs_checked``."""
    return not (torch.compiler.is_compiling() or _INPUTS_CHECKED.get())


@contextmanager
def inputs_checked() -> Iterator[None]:
    """Skip the per-step input checks of the objectives and likelihoods: for a loop whose
    inputs and targets were checked once before it and do not change (full-batch training)."""
    token = _INPUTS_CHECKED.set(True)
    try:
        yield
    finally:
        _INPUTS_CHECKED.reset(token)


def check_finite(name: str, values: torch.Tensor, what: str = "targets") -> None:
    """ValueError naming the first NaN or inf of ``values`` (one reduction when all are finite),
    as "``name``[i, j] is nan: ``what`` must be finite"."""
    if not checking() or not values.dtype.is_floating_point:
        return
    if not bool(torch.isfinite(values).all()):
        bad = ~torch.isfinite(values)
        raise ValueError(
            f"{name}{first_position(bad)} is {values[bad][0].item()}: {what} must be finite"
        )


class Likelihood(Protocol):
    def log_prob(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """log p(target_n | prediction_n) per example, (..., N)."""
        ...


class GaussianLikelihood(nn.Module):
    """Homoscedastic y ~ N(f(x), sigma^2) with one sigma per model.

    Args:
        num_models: M of a stack; None for one network (sigma is a scalar).
        fixed_std: sigma held fixed (a buffer); None learns it from ``initial_std``.
        initial_std: the starting sigma when it is learned.
        dtype: of log sigma.
    """

    def __init__(
        self,
        num_models: int | None = None,
        fixed_std: float | None = None,
        initial_std: float = 1.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        for name, value in (("fixed_std", fixed_std), ("initial_std", initial_std)):
            if value is not None and not value > 0:
                raise ValueError(f"GaussianLikelihood: {name} must be > 0, got {value}")
        shape = () if num_models is None else (num_models,)
        start = torch.full(shape, math.log(fixed_std or initial_std), dtype=dtype)
        if fixed_std is None:
            self.log_std = nn.Parameter(start)
        else:
            self.register_buffer("log_std", start)

    def std(self) -> torch.Tensor:
        return self.log_std.exp()

    def log_prob(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """log N(target | prediction, sigma^2): prediction (..., N, 1), target (..., N)."""
        if prediction.shape[:-1] != target.shape or prediction.shape[-1] != 1:
            raise ValueError(
                f"GaussianLikelihood: prediction {tuple(prediction.shape)} must be the target "
                f"{tuple(target.shape)} with a trailing output dimension of 1"
            )
        check_finite("GaussianLikelihood: target", target)
        return gaussian_log_prob(target, prediction.squeeze(-1), self.std().unsqueeze(-1))

    def mean(self, prediction: torch.Tensor) -> torch.Tensor:
        """The predicted mean f(x), (..., N), of a prediction (..., N, 1)."""
        return prediction.squeeze(-1)


class HeteroscedasticGaussianLikelihood(nn.Module):
    """y ~ N(mu(x), sigma(x)^2) with the network's two outputs as the mean and the log std
    (Nix & Weigend 1994; Kendall & Gal 2017):

        log p(y | x) = -(y - mu)^2 / (2 sigma^2) - log sigma - log(2 pi) / 2,
        sigma = min_std + exp(s),   (mu, s) = f(x)[..., 0], f(x)[..., 1].

    Why a log-std head (rather than a softplus one): exp maps the unbounded output onto
    sigma > 0 without a constraint; for a fixed mean and no floor the negative log-likelihood
    r^2 e^{-2s} / 2 + s is convex in s, with its minimum at s = log|r|; and a head whose output is
    a constant c gives exactly ``GaussianLikelihood(fixed_std=e^c)``, so the homoscedastic model
    is the special case. Kendall & Gal's log-variance head is the same head doubled. The floor
    ``min_std`` (0: none) keeps sigma away from 0 where a flexible mean interpolates a
    training point and the likelihood would grow without bound. The likelihood holds no
    parameters: the noise is the network's.

    Args:
        min_std: the floor added to exp(s), >= 0, in the target's units.
    """

    def __init__(self, min_std: float = 0.0) -> None:
        super().__init__()
        if not min_std >= 0:
            raise ValueError(
                f"HeteroscedasticGaussianLikelihood: min_std must be >= 0, got {min_std}"
            )
        self.min_std = float(min_std)

    def _heads(self, prediction: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if prediction.dim() < 2 or prediction.shape[-1] != 2:
            raise ValueError(
                f"HeteroscedasticGaussianLikelihood: prediction {tuple(prediction.shape)} must "
                "be (..., N, 2): a network with two outputs, the mean and the log std"
            )
        return prediction[..., 0], prediction[..., 1]

    def mean(self, prediction: torch.Tensor) -> torch.Tensor:
        """mu(x), (..., N), of a prediction (..., N, 2)."""
        return self._heads(prediction)[0]

    def std(self, prediction: torch.Tensor) -> torch.Tensor:
        """sigma(x) = min_std + exp(s(x)), (..., N), of a prediction (..., N, 2)."""
        return self._heads(prediction)[1].exp() + self.min_std

    def log_prob(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """log N(target | mu, sigma^2): prediction (..., N, 2), target (..., N) -> (..., N)."""
        mean, log_std = self._heads(prediction)
        if mean.shape != target.shape:
            raise ValueError(
                f"HeteroscedasticGaussianLikelihood: prediction {tuple(prediction.shape)} must "
                f"be the target {tuple(target.shape)} with a trailing output dimension of 2"
            )
        check_finite("HeteroscedasticGaussianLikelihood: target", target)
        if self.min_std == 0:  # log sigma = s exactly, without exp then log
            residual = (target - mean) * torch.exp(-log_std)
            return -0.5 * residual**2 - log_std - 0.5 * math.log(2 * math.pi)
        return gaussian_log_prob(target, mean, log_std.exp() + self.min_std)


REAL_TARGETS = (GaussianLikelihood, HeteroscedasticGaussianLikelihood)
"""The likelihoods of real targets (regression): their metrics are the NLL and the RMSE of
their ``mean``."""


class CategoricalLikelihood(nn.Module):
    """t ~ Cat(softmax(logits)): log p(t_n) = logits[t_n] - logsumexp(logits), per example."""

    def log_prob(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """logits (..., N, C), labels (..., N) or (N,) shared by a stack -> (..., N).

        Labels are integers, or floats holding whole numbers (converted); a label that is not a
        whole number is named with its position.
        """
        if prediction.shape[-2] != target.shape[-1]:
            raise ValueError(
                f"CategoricalLikelihood: need labels (..., N) for logits (..., N, C); "
                f"got labels {tuple(target.shape)}, logits {tuple(prediction.shape)}"
            )
        if target.dtype.is_floating_point:
            fractional = ~torch.isfinite(target) | (target != target.floor())
            if checking() and bool(fractional.any()):
                raise ValueError(
                    f"CategoricalLikelihood: label {target[fractional][0].item()} at target"
                    f"{first_position(fractional)} is not an integer (labels are class indices)"
                )
            target = target.long()
        classes = prediction.shape[-1]
        outside = (target < 0) | (target >= classes)
        if checking() and bool(outside.any()):
            raise ValueError(
                f"CategoricalLikelihood: label {target[outside][0].item()} at target"
                f"{first_position(outside)} is outside [0, {classes}) (the logits have {classes} "
                "classes)"
            )
        labels = target.expand(prediction.shape[:-1])
        return -functional.cross_entropy(
            prediction.flatten(0, -2), labels.reshape(-1), reduction="none"
        ).reshape(labels.shape)


class BernoulliLikelihood(nn.Module):
    """t ~ Bernoulli(sigmoid(logit)): log p(t_n) = -BCE(logit_n, t_n), per example."""

    def log_prob(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """logits (..., N) or (..., N, 1), labels in {0, 1} (..., N) or (N,) -> (..., N)."""
        logits = prediction.squeeze(-1) if prediction.shape[-1:] == (1,) else prediction
        if logits.shape[-1] != target.shape[-1]:
            raise ValueError(
                f"BernoulliLikelihood: logits {tuple(prediction.shape)} do not match labels "
                f"{tuple(target.shape)}"
            )
        outside = (target != 0) & (target != 1)
        if checking() and bool(outside.any()):
            raise ValueError(
                f"BernoulliLikelihood: label {target[outside][0].item()} at target"
                f"{first_position(outside)} is not 0 or 1"
            )
        labels = target.to(logits.dtype).expand(logits.shape)
        return -functional.binary_cross_entropy_with_logits(logits, labels, reduction="none")
