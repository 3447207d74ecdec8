"""Minibatch ELBO training of a stochastic classifier, and the phase-transition tracker.

Objective (003_6d46223d87d84c68.txt eq. 5), one LRT / noise sample per step:

    L = N / B sum_{n in batch} log p(t_n | x_n, W) - kl_weight * KL(q || p),

``training.objectives.elbo`` with a categorical likelihood, maximised with Adam by
``training.loop.run``; the loss is -L / N. Images are (N, 1, 28, 28). The model is one network
(logits (N, C)) or a stack of M (logits (M, N, C), every model seeing the same batches); the
tracker and the tables report model 0. Noise comes from one ``ModelGenerators`` stream per model,
so one network and the M = 1 stack with the same weights train identically.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from vbnn.classification.inference import accuracy, as_input, predict_probabilities
from vbnn.core.contracts import ForwardMode, InferenceMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import stack_size
from vbnn.layers.shell import VariationalLayer
from vbnn.training.likelihoods import CategoricalLikelihood
from vbnn.training.loop import run
from vbnn.training.objectives import elbo, network_output

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
        log_alpha_learning_rate: Adam step size of the log alpha parameters (None: the same as
            the others). Adam moves a parameter by at most ~lr per step, so at 1e-3 log alpha
            travels ~0.6 per epoch of 600 steps: a short run cannot reach the large alphas of a
            converged variance layer (log alpha 6.9 after ~200 epochs in 003). A larger value
            here is a deviation from the papers' protocol, used to see the phase transition
            within a CPU budget; results state when it was used.
    """

    epochs: int = 10
    batch_size: int = 100
    learning_rate: float = 1e-3
    kl_weight: float = 1.0
    seed: int = 0
    log_alpha_learning_rate: float | None = None

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ClassifierConfig: {name} must be >= 1")
        if not self.learning_rate > 0 or self.kl_weight < 0:
            raise ValueError("ClassifierConfig: learning_rate must be > 0 and kl_weight >= 0")


def train_classifier(
    model: nn.Module,
    prior: object,
    images: torch.Tensor,
    labels: torch.Tensor,
    config: ClassifierConfig,
    callback: EpochCallback | None = None,
    progress: bool = True,
    description: str = "train",
) -> list[float]:
    """Train ``model`` on images (N, ...) and labels (N,); returns the seconds of each epoch
    (training only, callbacks excluded).

    Raises:
        NonFiniteLossError: the loss becomes NaN or inf (names the iteration: epoch = the
            iteration divided by the steps per epoch, rounded up).
    """
    named = list(model.named_parameters())
    fast = [p for n, p in named if n.endswith("log_alpha")]
    groups = [{"params": [p for n, p in named if not n.endswith("log_alpha")]}]
    if fast:
        rate = config.log_alpha_learning_rate or config.learning_rate
        groups.append({"params": fast, "lr": rate})
    optimizer = torch.optim.Adam(groups, lr=config.learning_rate)
    device = next(model.parameters()).device
    models = stack_size(model)  # read once, not at every step
    generators = ModelGenerators.for_keys(config.seed, range(models or 1), "train", device)
    shuffle = torch.Generator().manual_seed(config.seed)
    likelihood = CategoricalLikelihood()
    count = len(labels)
    steps = -(-count // config.batch_size)
    order = torch.empty(0, dtype=torch.long)
    seconds: list[float] = []
    start = time.perf_counter()

    def objective(iteration: int) -> dict[str, torch.Tensor]:
        nonlocal order
        step = (iteration - 1) % steps
        if step == 0:
            order = torch.randperm(count, generator=shuffle)
        index = order[step * config.batch_size : (step + 1) * config.batch_size]
        inputs = as_input(models, images[index])
        return elbo(
            model,
            likelihood,
            prior,
            inputs,
            labels[index],
            generators,
            config.kl_weight,
            dataset_size=count,
        )

    def end_of_epoch(iteration: int, terms: dict[str, torch.Tensor]) -> None:
        nonlocal start
        if iteration % steps:
            return
        seconds.append(time.perf_counter() - start)
        if callback is not None:
            model.eval()
            callback(iteration // steps, model)
            model.train()
        start = time.perf_counter()

    run(
        objective,
        optimizer,
        config.epochs * steps,
        1.0 / count,
        [end_of_epoch],
        progress=progress,
        description=description,
    )
    return seconds


@torch.no_grad()
def evaluate_elbo(
    model: nn.Module, prior: object, images: torch.Tensor, labels: torch.Tensor, seed: int = 0
) -> dict[str, float]:
    """ELBO terms of model 0 over the whole set: data term sum_n log p(t_n | x_n, W) (one LRT
    sample), KL, ELBO = data - KL (nats, totals)."""
    device = next(model.parameters()).device
    generators = ModelGenerators.for_keys(seed, range(stack_size(model) or 1), "eval", device)
    likelihood = CategoricalLikelihood()
    data = 0.0
    for first in range(0, len(labels), 1000):
        inputs = as_input(model, images[first : first + 1000])
        logits = network_output(model, inputs, ForwardMode.SAMPLE, generators)
        values = likelihood.log_prob(logits, labels[first : first + 1000])
        data += float(values.reshape(-1, values.shape[-1])[0].sum())
    kl = float(model.kl(prior).flatten()[0])
    return {"ELBO": data - kl, "data_term": data, "KL": kl}


def accuracies(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    samples: int = 20,
    seed: int = 0,
    modes: tuple[InferenceMode, ...] = tuple(InferenceMode),
) -> dict[str, float]:
    """Accuracy (%) of model 0 in each inference mode on (images, labels)."""
    out = {}
    device = next(model.parameters()).device
    keys = range(stack_size(model) or 1)
    for mode in modes:
        generators = ModelGenerators.for_keys(seed, keys, "eval", device)
        probabilities = predict_probabilities(
            model, as_input(model, images), mode, generators, samples=samples
        )
        out[mode.value] = 100.0 * float(accuracy(probabilities, labels).flatten()[0])
    return out


def mean_log_alpha(model: nn.Module) -> dict[str, float]:
    """Mean log alpha of model 0 in every layer that has one (variational dropout, additive),
    keyed by the layer's name in ``model`` (``LeNet5`` names them conv1 .. dense2)."""
    if hasattr(model, "mean_log_alpha"):
        return model.mean_log_alpha()
    return {
        name: float(layer.mean_log_alpha().flatten()[0])
        for name, layer in model.named_modules()
        if isinstance(layer, VariationalLayer) and hasattr(layer, "mean_log_alpha")
    }


class PhaseTransitionTracker:
    """Epoch callback for any classifier (``LeNet5``, or a module from ``vbnn.convert``):
    accuracy in all four inference modes and each layer's mean log alpha
    (003 Fig. 3), optionally the number of kappa above threshold (002 Fig. 4) via ``extra``.

    Rows accumulate in ``self.rows``; ``frame()`` gives a pandas table.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        samples: int = 10,
        seed: int = 0,
        extra: Callable[[int, nn.Module], dict[str, float]] | None = None,
        on_row: Callable[[pd.DataFrame], None] | None = None,
    ) -> None:
        self.images, self.labels, self.samples, self.seed = images, labels, samples, seed
        self.extra, self.on_row = extra, on_row
        self.rows: list[dict[str, float]] = []

    def __call__(self, epoch: int, model: nn.Module) -> None:
        row: dict[str, float] = {"epoch": epoch}
        row.update(accuracies(model, self.images, self.labels, self.samples, self.seed))
        row.update({f"log_alpha_{k}": v for k, v in mean_log_alpha(model).items()})
        if self.extra is not None:
            row.update(self.extra(epoch, model))
        self.rows.append(row)
        if self.on_row is not None:
            self.on_row(self.frame())

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def plot_phase_transition(frame: pd.DataFrame, path, title: str = "") -> None:
    """Accuracy in the four modes vs epoch, with mean log alpha per layer (like 003 Fig. 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
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
    figure.savefig(path, dpi=120)
    plt.close(figure)
