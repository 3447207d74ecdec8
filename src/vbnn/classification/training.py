"""Minibatch ELBO training of a stochastic classifier, and the phase-transition tracker.

Objective (Neklyudov et al. 2019 eq. 5), one LRT / noise sample per step:

    L = N / B sum_{n in batch} log p(t_n | x_n, W) - kl_weight * KL(q || p),

``training.objectives.elbo`` with a categorical likelihood, maximised with Adam by
``vbnn.train_loop``; the loss is -L / N. Images are (N, 1, 28, 28). The model is one network
(logits (N, C)) or a stack of M (logits (M, N, C), every model seeing the same batches); the
tracker and the tables report model 0. Noise comes from one ``ModelGenerators`` stream per model,
so one network and the M = 1 stack with the same weights train identically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from vbnn.classification.inference import PREDICTIONS, predict
from vbnn.core.contracts import ParameterRole
from vbnn.core.defaults import BATCH_SIZE, EPOCHS, LEARNING_RATE
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import as_input, stack_size
from vbnn.metrics import accuracy
from vbnn.networks.summary import mean_log_alpha
from vbnn.plots import pyplot, save_figure
from vbnn.training.checkpoint import Stateful
from vbnn.training.likelihoods import CategoricalLikelihood
from vbnn.training.objectives import expected_log_likelihood, kl
from vbnn.training.settings import LearningRateSchedule, TrainerConfig
from vbnn.training.trainer import train

EpochCallback = Callable[[int, nn.Module], None]


@dataclass(frozen=True)
class ClassifierConfig:
    """Settings of one minibatch run (stored with its results).

    Attributes:
        epochs: passes over the training set.
        batch_size: examples per step.
        learning_rate: Adam step size.
        kl_weight: multiplies the KL (1: the ELBO).
        seed: seeds the shuffling and the training noise.
        log_alpha_learning_rate: Adam step size of the ``ParameterRole.LOG_ALPHA`` parameters
            (None: the same as the others). Adam moves a parameter by at most ~lr per step, so at
            1e-3 log alpha travels ~0.6 per epoch of 600 steps: a short run cannot reach the
            large alphas of a converged variance layer (log alpha 6.9 after ~200 epochs in
            Neklyudov et al. 2019). A larger value here is a deviation from the papers'
            protocol, used to see the phase transition within a CPU budget; results state when
            it was used.
        schedule: how both step sizes change over the epochs (``LearningRateSchedule``).
        eval_every: the epoch callback (e.g. the phase-transition tracker) runs after every
            ``eval_every``-th epoch and after the last one.
    """

    epochs: int = EPOCHS
    batch_size: int = BATCH_SIZE
    learning_rate: float = LEARNING_RATE
    kl_weight: float = 1.0
    seed: int = 0
    log_alpha_learning_rate: float | None = None
    schedule: LearningRateSchedule = LearningRateSchedule.CONSTANT
    eval_every: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", LearningRateSchedule(self.schedule))
        for name in ("epochs", "batch_size", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"ClassifierConfig: {name} must be >= 1")
        if not self.learning_rate > 0 or self.kl_weight < 0:
            raise ValueError("ClassifierConfig: learning_rate must be > 0 and kl_weight >= 0")

    def evaluates_after(self, epoch: int) -> bool:
        """Whether the epoch callback runs after ``epoch`` (1-based)."""
        return epoch % self.eval_every == 0 or epoch == self.epochs


class _EveryK:
    """``train``'s epoch callback that calls an ``EpochCallback`` after the epochs where
    ``config.evaluates_after``; its state (``Stateful``) travels in the checkpoint."""

    def __init__(self, callback: EpochCallback, config: ClassifierConfig) -> None:
        self.callback, self.config = callback, config

    def __call__(self, epoch: int, model: nn.Module, metrics: dict) -> None:
        if self.config.evaluates_after(epoch):
            self.callback(epoch, model)

    def state_dict(self) -> dict:
        return self.callback.state_dict() if isinstance(self.callback, Stateful) else {}

    def load_state_dict(self, state: dict) -> None:
        if isinstance(self.callback, Stateful):
            self.callback.load_state_dict(state)


# Parameters: what trains (model, prior, data, config), then independent keyword-only options
def train_classifier(
    model: nn.Module,
    prior: object,
    images: torch.Tensor,
    labels: torch.Tensor,
    config: ClassifierConfig,
    *,
    callback: EpochCallback | None = None,
    progress: bool = True,
    description: str = "train",
    checkpoint: Path | None = None,
) -> list[float]:
    """Train ``model`` on images (N, ...) and labels (N,) by ``vbnn.train`` (categorical
    likelihood, the ELBO, minibatches of ``config.batch_size``); returns the seconds of each
    epoch (training only, callbacks excluded). The model is left in ``.train()`` mode.

    With ``checkpoint`` (a file path) the whole state of the run is written there at the end of
    every epoch (``training.checkpoint``), and a run finding that file continues after the
    epoch it holds: a killed run loses at most the epoch under way, and the resumed run gives
    the same numbers as one that was never stopped. The caller deletes the file once it has
    stored the result.

    Raises:
        NonFiniteLossError: the loss becomes NaN or inf (names the epoch and the step).
        ValueError: ``checkpoint`` was written by a run with other settings.
    """
    settings = TrainerConfig(
        kl_weight=config.kl_weight,
        rates=((ParameterRole.LOG_ALPHA, config.log_alpha_learning_rate),),
        schedule=config.schedule,
        checkpoint_file="training.pt" if checkpoint is None else Path(checkpoint).name,
        description=description,
        restore_train_mode=True,
    )
    result = train(
        model,
        (images, labels),
        likelihood=CategoricalLikelihood(),
        prior=prior,  # type: ignore[arg-type]
        epochs=config.epochs,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        checkpoint=None if checkpoint is None else Path(checkpoint).parent,
        seed=config.seed,
        progress=progress,
        callbacks=() if callback is None else (_EveryK(callback, config),),
        config=settings,
    )
    return [row["seconds"] for row in result.history]


@torch.no_grad()
def evaluate_elbo(
    model: nn.Module,
    prior: object,
    images: torch.Tensor,
    labels: torch.Tensor,
    seed: int = 0,
    chunk: int = 1000,
) -> dict[str, float]:
    """``vbnn.elbo`` of model 0 over the whole set, ``chunk`` examples at a time (nats, totals).

    The data term sum_n E_q[log p(t_n | x_n, W)] (one LOCAL draw per example) is the sum over the
    chunks of ``expected_log_likelihood``; ELBO = data term - ``vbnn.kl``.
    """
    device = next(model.parameters()).device
    generators = ModelGenerators.for_keys(seed, range(stack_size(model) or 1), "eval", device)
    likelihood = CategoricalLikelihood()
    data = 0.0
    for first in range(0, len(labels), chunk):
        rows = slice(first, first + chunk)
        inputs = as_input(model, images[rows])
        value = expected_log_likelihood(model, likelihood, inputs, labels[rows], generators)
        data += float(value.flatten()[0])
    divergence = float(kl(model, prior).flatten()[0])
    return {"ELBO": data - divergence, "data_term": data, "KL": divergence}


def accuracies(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    samples: int = 20,
    seed: int = 0,
    predictions: tuple[str, ...] = tuple(PREDICTIONS),
) -> dict[str, float]:
    """Accuracy (%) of model 0 under each of the ``predictions`` (``inference.PREDICTIONS``
    labels) on (images, labels); the averaged ones over ``samples`` passes."""
    out = {}
    device = next(model.parameters()).device
    models = stack_size(model)
    for label in predictions:
        generators = ModelGenerators.for_keys(seed, range(models or 1), "eval", device)
        probabilities = predict(model, as_input(models, images), label, generators, samples)
        first = probabilities if models is None else probabilities[0]
        out[label] = 100.0 * float(accuracy(first, labels))
    return out


class PhaseTransitionTracker:
    """Epoch callback for any classifier (``LeNet5``, or a module from ``vbnn.convert``):
    accuracy under the four predictions of Table 2 (``inference.PREDICTIONS``) and each layer's
    mean log alpha (Neklyudov et al. 2019 Fig. 3; ``networks.summary.mean_log_alpha``, the
    layers named by ``layer_names``), optionally the number of kappa above threshold (Neklyudov
    et al. 2018 Fig. 4) via ``extra``.

    Rows accumulate in ``self.rows``; ``frame()`` gives a pandas table; ``state_dict`` lets a
    checkpoint carry them (``training.checkpoint``).
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        samples: int = 10,
        seed: int = 0,
        extra: Callable[[int, nn.Module], dict[str, float]] | None = None,
        on_row: Callable[[pd.DataFrame], None] | None = None,
        layer_names: Sequence[str] | None = None,
    ) -> None:
        self.images, self.labels, self.samples, self.seed = images, labels, samples, seed
        self.extra, self.on_row, self.layer_names = extra, on_row, layer_names
        self.rows: list[dict[str, float]] = []

    def __call__(self, epoch: int, model: nn.Module) -> None:
        row: dict[str, float] = {"epoch": epoch}
        row.update(accuracies(model, self.images, self.labels, self.samples, self.seed))
        alphas = mean_log_alpha(model, self.layer_names)
        row.update({f"log_alpha_{k}": v for k, v in alphas.items()})
        if self.extra is not None:
            row.update(self.extra(epoch, model))
        self.rows.append(row)
        if self.on_row is not None:
            self.on_row(self.frame())

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def state_dict(self) -> dict:
        """The rows so far (and ``extra``'s state when it has one), for a checkpoint."""
        extra = self.extra.state_dict() if isinstance(self.extra, Stateful) else None
        return {"rows": [dict(row) for row in self.rows], "extra": extra}

    def load_state_dict(self, state: dict) -> None:
        self.rows = [dict(row) for row in state["rows"]]
        if isinstance(self.extra, Stateful) and state["extra"] is not None:
            self.extra.load_state_dict(state["extra"])


def plot_phase_transition(frame: pd.DataFrame, path, title: str = "") -> None:
    """Accuracy in the four modes vs epoch, with mean log alpha per layer (like Neklyudov et al.
    2019 Fig. 3)."""
    figure, (left, right) = pyplot().subplots(1, 2, figsize=(10, 4))
    labels = {
        "deterministic": "Mean propagation",
        "sample": "Sample",
        "ensemble": "Ensemble",
        "zero-mean": "Zero-mean sample ensemble",
    }
    for column, label in labels.items():
        if column in frame:
            left.plot(frame["epoch"], frame[column], marker="o", label=label)
    left.set(xlabel="# Epoch", ylabel="Accuracy (%)", title=title or "phase transition")
    left.legend()
    for column in [c for c in frame.columns if c.startswith("log_alpha_")]:
        right.plot(frame["epoch"], frame[column], marker="o", label=column[len("log_alpha_") :])
    right.set(xlabel="# Epoch", ylabel="mean log alpha")
    if right.lines:
        right.legend()
    figure.tight_layout()
    save_figure(figure, path, dpi=120)
