"""Appendix D of Neklyudov et al. 2019 (Fig. 9): per-class distributions of the activations of
a variance layer of LeNet-5 on MNIST, for a few random neurons.

The network is LeNet-5 with dense1 a layer-wise variational dropout layer (Neklyudov et al. 2019 eq.
14; the other layers deterministic, ReLU), trained briefly with a faster Adam step for log alpha (a
stated deviation: ``vbnn_lab.adversarial.models``). For a test image x the pre-activation of
dense1 neuron j under q is Gaussian (local reparameterization, Neklyudov et al. 2019 appendix E):

    b_j(x) ~ N(m_j(x), s_j(x)^2),  m_j = sum_i a_i mu_ij + bias_j,  s_j^2 = sum_i a_i^2 sigma_ij^2,

with a = the input of dense1. Fig. 9 plots, per class c, the average over the test images of
class c of the density p(b_j | x) (line) and its standard deviation over those images (band); the
same under the zero-mean approximation N(0, s_j^2) (Neklyudov et al. 2019 Theorem 1), the variance
network proper, forms the second row. Writes ``activations.png``, ``neurons.csv`` (per neuron and
class: mean of m_j and of s_j) and ``summary.md``; the trained network is kept in ``OUT/runs``.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.classification.training import ClassifierConfig, accuracies, train_classifier
from vbnn.data.mnist import load_images
from vbnn.networks.lenet import LAYER_NAMES, LeNet5
from vbnn.networks.summary import mean_log_alpha
from vbnn.plots import pyplot, save_figure
from vbnn.priors.log_uniform import LogUniformPrior
from vbnn.stores import unit_store
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table
from vbnn_lab.adversarial.models import Training, TrainingBudget, build

__all__ = ["DESCRIPTION", "activation_moments", "add_arguments", "class_densities", "run"]

DESCRIPTION = "Neklyudov et al. 2019 appendix D: per-class activations of a variance layer, MNIST"
DEFAULT_OUT = "results/variance-activations"
DENSE1 = 2  # index of dense1 in LeNet5.layers
BUDGETS = {"quick": TrainingBudget(train_size=3000, epochs=3),
           "full": TrainingBudget(train_size=60000, epochs=5)}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="3000 images, 3 epochs (~1 min)")
    parser.add_argument("--epochs", type=int, default=None, help="override the budget's")
    parser.add_argument("--train-size", type=int, default=None, help="override the budget's")
    parser.add_argument("--neurons", type=int, default=4, help="random dense1 neurons shown")
    parser.add_argument("--images", type=int, default=2000, help="test images used")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")


@torch.no_grad()
def activation_moments(model: LeNet5, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, s) of dense1's pre-activations, each (N, 500), for images (N, 1, 28, 28) (model 0)."""
    inputs = model.input_of(DENSE1, images[None])  # (1, N, 800): a stack of one
    layer = model.layers[DENSE1]
    mean_weight, var_weight = layer.effective_moments()
    mean_bias, var_bias = layer.bias_moments()
    mean = layer.operator.apply(inputs, mean_weight, mean_bias)
    var = layer.operator.apply(inputs * inputs, var_weight, var_bias)
    return mean[0], var[0].clamp_min(0.0).sqrt()


def class_densities(
    mean: torch.Tensor, std: torch.Tensor, labels: torch.Tensor, grid: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """Average and std over the images of each class of N(z; m, s^2) on ``grid`` (Z,), for one
    neuron (m, s: (N,)); returns two (classes, Z) arrays."""
    scale = std.clamp_min(1e-12)[:, None]
    density = torch.exp(-0.5 * ((grid[None] - mean[:, None]) / scale) ** 2)
    density = density / (scale * math.sqrt(2 * math.pi))
    classes = int(labels.max()) + 1
    average = np.stack([density[labels == c].mean(0).numpy() for c in range(classes)])
    spread = np.stack([density[labels == c].std(0).numpy() for c in range(classes)])
    return average, spread


def plot_activations(mean, std, labels, neurons, path: Path) -> Path:
    figure, axes = pyplot().subplots(
        2, len(neurons), figsize=(3.6 * len(neurons), 6.4), squeeze=False
    )
    for column, neuron in enumerate(neurons):
        for row, centre in enumerate((mean[:, neuron], torch.zeros_like(mean[:, neuron]))):
            spread = std[:, neuron]
            width = float((centre.abs() + 3 * spread).quantile(0.99))
            grid = torch.linspace(-width, width, 300)
            average, band = class_densities(centre, spread, labels, grid)
            axis = axes[row, column]
            for c in range(len(average)):
                line = axis.plot(grid, average[c], lw=1, label=str(c))[0]
                axis.fill_between(grid, average[c] - band[c], average[c] + band[c],
                                  color=line.get_color(), alpha=0.12)  # fmt: skip
            kind = "N(m, s^2)" if row == 0 else "zero-mean N(0, s^2)"
            axis.set(title=f"neuron #{neuron}, {kind}", xlabel="pre-activation", yticks=[])
    axes[0, 0].legend(fontsize=6, ncol=2, title="class", loc="upper right")
    figure.tight_layout()
    return save_figure(figure, path, dpi=120)


def trained_network(
    budget: TrainingBudget, seed: int, store: Path, data_dir: str | None, progress: bool
) -> LeNet5:
    """The dense1 variance LeNet-5 (one model), trained or loaded from ``store``."""
    model = build(Training.VARIANCE, 1, seed)
    settings = {"experiment": "variance-activations", "seed": seed, **asdict(budget)}
    stored = unit_store.load(store, settings)
    if stored is not None:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in stored[0].items()})
        return model.eval()
    train_x, train_y = load_images("mnist", "train", data_dir)
    config = ClassifierConfig(epochs=budget.epochs, batch_size=budget.batch_size, seed=seed,
                              learning_rate=budget.learning_rate,
                              log_alpha_learning_rate=budget.log_alpha_learning_rate)  # fmt: skip
    started = time.perf_counter()
    train_classifier(model, LogUniformPrior(), train_x[: budget.train_size],
                     train_y[: budget.train_size], config, progress=progress)  # fmt: skip
    arrays = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    unit_store.save(store, settings, arrays, {"train_seconds": time.perf_counter() - started})
    return model.eval()


def run(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    budget = BUDGETS["quick" if args.quick else "full"]
    if args.epochs is not None or args.train_size is not None:
        budget = TrainingBudget(train_size=args.train_size or budget.train_size,
                                epochs=args.epochs or budget.epochs)  # fmt: skip
    out, started = Path(args.out), time.perf_counter()
    model = trained_network(budget, args.seed, out / "runs", args.data_dir, not args.no_progress)
    test_x, test_y = load_images("mnist", "test", args.data_dir)
    images, labels = test_x[: args.images], test_y[: args.images]
    mean, std = activation_moments(model, images)
    neurons = sorted(torch.randperm(mean.shape[1], generator=torch.Generator().manual_seed(
        args.seed))[: args.neurons].tolist())  # fmt: skip
    plot_activations(mean, std, labels, neurons, out / "activations.png")
    rows = [{"neuron": n, "class": c, "mean m": float(mean[labels == c, n].mean()),
             "mean s": float(std[labels == c, n].mean())}
            for n in neurons for c in range(10)]  # fmt: skip
    write_atomic(out / "neurons.csv", pd.DataFrame(rows).to_csv(index=False))
    accuracy = accuracies(model, images, labels, samples=10, seed=args.seed)
    log_alpha = mean_log_alpha(model, LAYER_NAMES)["dense1"]
    # how much of |b| is the noise: share of the second moment m^2 + s^2 held by s^2
    variance_share = float((std**2).sum() / (mean**2 + std**2).sum())
    note = (f"LeNet-5, dense1 layer-wise variational dropout, {budget.epochs} epochs on "
            f"{budget.train_size} MNIST images (log alpha Adam step "
            f"{budget.log_alpha_learning_rate}); dense1 mean log alpha {log_alpha:.2f}; share of "
            f"the second moment of dense1's pre-activations held by the variance "
            f"{variance_share:.3f}; wall {time.perf_counter() - started:.0f} s")  # fmt: skip
    table = pd.DataFrame([{k: round(v, 2) for k, v in accuracy.items()}])
    text = (
        f"{note}\n\nTest accuracy (%) on {len(labels)} images (K = 10):\n\n"
        f"{markdown_table(table, float_format='{:.2f}')}\n\nneurons shown: {neurons}\n"
    )
    write_atomic(out / "summary.md", text)
    print(text)
