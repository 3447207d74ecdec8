"""SWAG and MultiSWAG: a Gaussian fitted to the iterates of SGD (Maddox et al. 2019).

Training collects the iterates theta_1 .. theta_n of SGD (``vbnn.train`` with
``optimizer="sgd"`` at a high constant learning rate, after a burn-in) with a
``SWAGCollector``, once an epoch (an epoch callback) or every c steps (a step callback). Over the
P trainable parameters it keeps (Maddox et al. 2019, Algorithm 1)

    theta_bar = (1/n) sum_i theta_i,        sigma_diag = (1/n) sum_i theta_i^2 - theta_bar^2,

(``sigma_diag`` clamped at 0 against rounding) and the deviation matrix D (P, K) whose columns
are the last K deviations theta_i - theta_bar_i, theta_bar_i the running mean after theta_i.
The SWAG posterior is N(theta_bar, Sigma) with (eq. 1, ``scale`` s = 1/2)

    Sigma = s (diag(sigma_diag) + D D^T / (K - 1)),
    theta = theta_bar + sqrt(s) sigma_diag^(1/2) * z1 + sqrt(s / (K - 1)) D z2,

z1 ~ N(0, I_P), z2 ~ N(0, I_K) drawn from an explicit ``torch.Generator``; ``rank`` K = 0 is
SWAG-Diagonal. A network with batch normalisation gets its running statistics recomputed on
training inputs for every sample (``update_batch_norm``), as the paper does; the others skip it.

``swag_predict`` returns S predictive samples f_s(x) of each posterior, the layout of
``vbnn.sample``: a classifier's predictive is ``predictive_probabilities`` (the mean softmax),
a regression's the Gaussian mixture 1/S sum_s N(f_s(x), sigma^2) with the trained likelihood's
noise std (``metrics.gaussian_mixture_log_likelihood``). MultiSWAG (Wilson & Izmailov 2020)
is M SWAG posteriors of independent runs (different seeds); its predictive is their equal
mixture, the M S samples of ``swag_predict`` given the M posteriors.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from vbnn.core.batch_rule import Inputs, predict, rows, take
from vbnn.training.loop import Terms


def _trainable(network: nn.Module) -> list[nn.Parameter]:
    return [p for p in network.parameters() if p.requires_grad]


@dataclass(frozen=True)
class SWAGPosterior:
    """The SWAG Gaussian over a network's P trainable parameters (module docstring), float64.

    Attributes:
        mean: theta_bar (P,).
        variance: sigma_diag (P,), >= 0.
        deviations: D (P, K), the last K deviations as columns (K = 0: SWAG-Diagonal).
    """

    mean: torch.Tensor
    variance: torch.Tensor
    deviations: torch.Tensor

    def __post_init__(self) -> None:
        size = self.mean.shape
        if self.mean.dim() != 1 or self.variance.shape != size:
            raise ValueError(
                f"SWAGPosterior: mean {tuple(size)} and variance "
                f"{tuple(self.variance.shape)} must both be (P,)"
            )
        if self.deviations.dim() != 2 or self.deviations.shape[0] != size[0]:
            raise ValueError(
                f"SWAGPosterior: deviations must be (P, K) = ({size[0]}, K), got "
                f"{tuple(self.deviations.shape)}"
            )
        if self.deviations.shape[1] == 1:
            raise ValueError(
                "SWAGPosterior: one deviation gives no low-rank part (K - 1 = 0); "
                "collect at least 2 iterates"
            )

    @property
    def rank(self) -> int:
        """K, the columns of ``deviations``."""
        return self.deviations.shape[1]

    def covariance(self, scale: float = 0.5) -> torch.Tensor:
        """Sigma = scale (diag(sigma_diag) + D D^T / (K - 1)), dense (P, P): for small P."""
        sigma = torch.diag(self.variance)
        if self.rank:
            sigma = sigma + self.deviations @ self.deviations.T / (self.rank - 1)
        return scale * sigma

    def sample(self, generator: torch.Generator, scale: float = 0.5) -> torch.Tensor:
        """One draw theta ~ N(theta_bar, Sigma) (module docstring), (P,) float64: z1 (P,), then
        z2 (K,), from ``generator``."""
        if scale < 0:
            raise ValueError(f"SWAGPosterior.sample: scale must be >= 0, got {scale}")
        options = {"generator": generator, "dtype": torch.float64, "device": generator.device}
        z1 = torch.randn(self.mean.shape[0], **options).to(self.mean.device)
        draw = self.variance.sqrt() * z1
        if self.rank:
            z2 = torch.randn(self.rank, **options).to(self.mean.device)
            draw = draw + self.deviations @ z2 / (self.rank - 1) ** 0.5
        return self.mean + scale**0.5 * draw


class SWAGCollector:
    """The running SWAG moments of a network's trainable parameters (module docstring).

    Collects iterate j (an epoch or a step, counted from 1) when j >= ``start`` and
    (j - ``start``) is a multiple of ``every``. As an epoch callback,
    ``vbnn.train(..., callbacks=[collector])``, it travels in the run's checkpoint; as a step
    callback, ``TrainerConfig(step_callbacks=(collector.after_step,))``, it does not (a resumed
    run would collect again from an empty state). ``collect`` takes the current parameters at
    any time (a loop of one's own).

    Args:
        network: the network being trained; its parameters with ``requires_grad``.
        rank: K, the deviations kept (0: SWAG-Diagonal; else >= 2).
        start: the first epoch (or step) collected; the ones before are the burn-in.
        every: collect every ``every``-th epoch (or step) from ``start``.
    """

    def __init__(self, network: nn.Module, rank: int = 20, start: int = 1, every: int = 1):
        if rank < 0 or rank == 1 or start < 1 or every < 1:
            raise ValueError(
                f"SWAGCollector: rank must be 0 or >= 2, start and every >= 1; got "
                f"rank={rank}, start={start}, every={every}"
            )
        self.network, self.parameters = network, _trainable(network)
        if not self.parameters:
            raise ValueError(f"SWAGCollector: {type(network).__name__} has no trainable parameter")
        self.rank, self.start, self.every = rank, start, every
        size = sum(p.numel() for p in self.parameters)
        device = self.parameters[0].device
        self.count = 0
        self.mean = torch.zeros(size, dtype=torch.float64, device=device)
        self.square_mean = torch.zeros_like(self.mean)
        self.deviations = self.mean.new_zeros(size, 0)

    def collect(self) -> None:
        """Add the current parameters as the next iterate theta_n (Algorithm 1)."""
        theta = parameters_to_vector([p.detach() for p in self.parameters]).double()
        if theta.device != self.mean.device:  # the network moved (``vbnn.train(device=...)``)
            self.load_state_dict(self.state_dict(), theta.device)
        self.count += 1
        # m_n = m_{n-1} + (theta_n - m_{n-1}) / n: a constant iterate leaves m exactly unchanged
        self.mean.add_(theta - self.mean, alpha=1.0 / self.count)
        self.square_mean.add_(theta.square() - self.square_mean, alpha=1.0 / self.count)
        if self.rank:
            kept = self.deviations[:, -(self.rank - 1) :] if self.deviations.shape[1] else None
            column = (theta - self.mean).unsqueeze(1)
            self.deviations = column if kept is None else torch.cat([kept, column], dim=1)

    def _due(self, index: int) -> bool:
        return index >= self.start and (index - self.start) % self.every == 0

    def __call__(self, epoch: int, network: nn.Module, metrics: dict) -> None:
        """The epoch callback of ``vbnn.train``: collects after a due epoch."""
        if network is not self.network:
            raise ValueError(
                f"SWAGCollector: called with another network ({type(network).__name__}) than "
                f"the one it collects ({type(self.network).__name__})"
            )
        if self._due(epoch):
            self.collect()

    def after_step(self, step: int, terms: Terms) -> None:
        """The step callback of ``TrainerConfig.step_callbacks``: collects after a due step."""
        if self._due(step):
            self.collect()

    def posterior(self) -> SWAGPosterior:
        """The SWAG posterior of the iterates collected so far.

        Raises:
            ValueError: no iterate collected, or one only while ``rank`` >= 2.
        """
        if self.count == 0 or (self.rank and self.count < 2):
            raise ValueError(
                f"SWAGCollector: {self.count} iterates collected (start="
                f"{self.start}, every={self.every}); SWAG needs "
                f"{2 if self.rank else 1}"
            )
        variance = (self.square_mean - self.mean.square()).clamp_min(0.0)
        return SWAGPosterior(self.mean.clone(), variance, self.deviations.clone())

    def state_dict(self) -> dict[str, Any]:
        """The collected moments (a checkpoint of ``vbnn.train`` holds them)."""
        return {
            "count": self.count,
            "mean": self.mean.clone(),
            "square_mean": self.square_mean.clone(),
            "deviations": self.deviations.clone(),
        }

    def load_state_dict(self, state: dict[str, Any], device: torch.device | None = None) -> None:
        """Restore the moments of ``state_dict`` (onto ``device``; None: where they are)."""
        device = device or self.mean.device
        self.count = int(state["count"])
        self.mean = state["mean"].to(device)
        self.square_mean = state["square_mean"].to(device)
        self.deviations = state["deviations"].to(device)


def _batch_norms(network: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [
        module
        for module in network.modules()
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats
    ]


@torch.no_grad()
def update_batch_norm(network: nn.Module, inputs: Inputs, batch_size: int | None) -> None:
    """Recompute the running statistics of every batch norm of ``network`` on ``inputs``.

    Each batch norm is reset and given cumulative averaging (momentum None), then the batches
    ``inputs[b : b + batch_size]`` pass with the batch norms alone in train mode (the other
    modules in eval mode: no dropout, family layers at their means): running_mean becomes the
    mean over the batches of each batch's mean, running_var of each batch's unbiased variance
    (with batches of equal size, the inputs' mean at that layer). The modules' modes and
    momenta are restored; a network without batch norm is left untouched.

    Args:
        network: any module.
        inputs: (N, ...) training inputs (a subset of a few batches suffices).
        batch_size: examples per pass (None: all N at once).
    """
    norms = _batch_norms(network)
    if not norms:
        return
    if batch_size is not None and batch_size < 2:
        raise ValueError(f"update_batch_norm: batch_size must be >= 2, got {batch_size}")
    modes = {module: module.training for module in network.modules()}
    momenta = [norm.momentum for norm in norms]
    network.eval()
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
        norm.train()
    step = batch_size or rows(inputs)
    try:
        for begin in range(0, rows(inputs), step):
            predict(network, take(inputs, slice(begin, begin + step)))
    finally:
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
        for module, training in modes.items():
            module.training = training


def _load(parameters: list[nn.Parameter], theta: torch.Tensor) -> None:
    """Copy the (P,) vector ``theta`` into ``parameters`` in place, in their order."""
    begin = 0
    for parameter in parameters:
        size = parameter.numel()
        parameter.copy_(theta[begin : begin + size].view_as(parameter))
        begin += size


def _passes(network: nn.Module, x: Inputs, step: int) -> torch.Tensor:
    """The network's predictions of ``x`` by the batch rule, ``step`` examples at a time."""
    return torch.cat(
        [predict(network, take(x, slice(b, b + step))) for b in range(0, rows(x), step)]
    )


@dataclass(frozen=True)
class BatchNormData:
    """Training inputs on which ``swag_predict`` recomputes batch-norm statistics per sample.

    Attributes:
        inputs: (N, ...) training inputs (a few batches suffice).
        batch_size: examples per pass (None: all at once).
    """

    inputs: Inputs
    batch_size: int | None = None


@torch.no_grad()
def swag_predict(
    posteriors: SWAGPosterior | Sequence[SWAGPosterior],
    network: nn.Module,
    x: Inputs,
    *,
    samples: int,
    generator: torch.Generator,
    scale: float = 0.5,
    batch_norm: BatchNormData | None = None,
    batch_size: int | None = None,
) -> torch.Tensor:
    """S = ``samples`` outputs f_s(x) of ``network`` under each posterior: (M S, N, ...).

    For each of the M posteriors in turn (one: SWAG; several: MultiSWAG, the equal mixture of
    M runs), S parameter draws (``SWAGPosterior.sample``, from ``generator``) are loaded into
    the network, its batch norms recomputed on ``batch_norm`` (``update_batch_norm``), and
    ``x`` passes in eval mode, ``batch_size`` examples at a time (None: all N at once).
    ``network`` is any network of the posteriors' architecture (e.g. the last one trained); its
    parameters, buffers and mode are restored after.

    Raises:
        ValueError: ``samples`` or ``batch_size`` < 1, no posterior, a posterior of another
            number of parameters, or a network with batch norm and no ``batch_norm`` data.
    """
    posteriors = [posteriors] if isinstance(posteriors, SWAGPosterior) else list(posteriors)
    parameters = _trainable(network)
    _check_predict(posteriors, network, samples, batch_size, batch_norm)
    state, training = copy.deepcopy(network.state_dict()), network.training
    outputs = []
    try:
        for posterior in posteriors:
            for _ in range(samples):
                theta = posterior.sample(generator, scale)
                _load(parameters, theta)
                if batch_norm is not None:
                    update_batch_norm(network, batch_norm.inputs, batch_norm.batch_size)
                network.eval()
                outputs.append(_passes(network, x, batch_size or rows(x)))
    finally:
        network.load_state_dict(state)
        network.train(training)
    return torch.stack(outputs)


def _check_predict(
    posteriors: list[SWAGPosterior],
    network: nn.Module,
    samples: int,
    batch_size: int | None,
    batch_norm: BatchNormData | None,
) -> None:
    """``swag_predict``'s ValueErrors (its docstring), before any sampling."""
    size = sum(p.numel() for p in _trainable(network))
    if samples < 1 or not posteriors or (batch_size is not None and batch_size < 1):
        raise ValueError(
            f"swag_predict: samples={samples}, batch_size={batch_size} and {len(posteriors)} "
            "posteriors; need >= 1 of each"
        )
    for index, posterior in enumerate(posteriors):
        if posterior.mean.shape[0] != size:
            raise ValueError(
                f"swag_predict: posteriors[{index}] holds {posterior.mean.shape[0]} "
                f"parameters, {type(network).__name__} has {size}"
            )
    if _batch_norms(network) and batch_norm is None:
        raise ValueError(
            f"swag_predict: {type(network).__name__} has batch norm; pass "
            "batch_norm=BatchNormData(training inputs) to recompute its "
            "statistics for each sample"
        )
