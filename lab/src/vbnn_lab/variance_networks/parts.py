"""Pieces of the variance-networks reproduction: the toy problem (Neklyudov et al. 2019 Fig. 1),
kappa and pruning
studies (Neklyudov et al. 2018 Figs. 3-5, Neklyudov et al. 2019 Fig. 5) and their plots. Used by
``variance_networks``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from vbnn.classification.inference import PREDICTIONS, predict
from vbnn.classification.kappa import (
    clear_masks,
    count_above,
    dense_layer_kappa,
    sparse_ensemble_masks,
)
from vbnn.classification.training import accuracies
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers import Point, ZeroMean
from vbnn.metrics import accuracy
from vbnn.plots import pyplot, save_figure
from vbnn.priors.log_uniform import LogUniformPrior
from vbnn.training.likelihoods import CategoricalLikelihood
from vbnn.training.settings import TrainerConfig
from vbnn.training.trainer import train

TOY_CENTRES = (
    (3.0, 3.0),
    (3.0, 10.0),
    (10.0, 3.0),
    (10.0, 10.0),
)  # Neklyudov et al. 2019 section 3.2


# --- toy four-class problem with a two-neuron variance bottleneck (Neklyudov et al. 2019 Fig. 1)
# ------------------


def toy_data(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` points per class from N(centre, I) around the four centres of Neklyudov et al. 2019
    section 3.2."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.tensor(TOY_CENTRES)
    labels = torch.arange(4).repeat_interleave(count)
    return centres[labels] + torch.randn(4 * count, 2, generator=generator), labels


class ToyNetwork(nn.Module):
    """Six dense layers with ReLU; the fifth is a zero-mean (Gaussian variance) layer with two
    output neurons. M models (independent initialisations) are trained together."""

    def __init__(self, generators: ModelGenerators, width: int = 32) -> None:
        super().__init__()
        sizes = [(2, width), (width, width), (width, width), (width, width)]
        self.layers = nn.ModuleList(Point(i, o, generators) for i, o in sizes)
        self.layers.append(ZeroMean(width, 2, generators))
        self.layers.append(Point(2, 4, generators))

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode | str | None = None,
        noise: NoiseSource | None = None,
        bottleneck: bool = False,
    ) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x, mode, noise)
            if index == 4 and bottleneck:
                return x
            if index < 5:
                x = torch.relu(x)
        return x


def train_toy(
    network: ToyNetwork, x: torch.Tensor, y: torch.Tensor, noise: ModelGenerators, steps: int
) -> None:
    """``steps`` full-batch Adam steps (rate 3e-3) on the ELBO per example of (x, y) under the
    log-uniform prior (``vbnn.train``: one epoch a step, the rows in their order), every model
    of the stack on the same data; the network is left in ``.train()`` mode."""
    train(network, (x, y), likelihood=CategoricalLikelihood(), prior=LogUniformPrior(),
          epochs=steps, batch_size=None, learning_rate=3e-3, progress=False,
          config=TrainerConfig(shuffle=False, restore_train_mode=True), noise=noise)  # fmt: skip


def run_toy(out: Path, seeds: tuple[int, ...], steps: int, per_class: int) -> pd.DataFrame:
    """Train ``len(seeds)`` toy networks as one stack; plot the bottleneck samples (Fig. 1)."""
    x, y = toy_data(per_class, seed=100)
    test_x, test_y = toy_data(per_class, seed=101)
    centre, scale = x.mean(0), x.std(0)
    x, test_x = (x - centre) / scale, (test_x - centre) / scale
    models = len(seeds)
    network = ToyNetwork(ModelGenerators.for_keys(seeds[0], range(models), "init"))
    generators = ModelGenerators.for_keys(seeds[0], range(models), "train")
    train_toy(network, x, y, generators, steps)
    test_batch = test_x.unsqueeze(0).expand(models, -1, -1)
    rows = []
    for label in PREDICTIONS:
        noise = ModelGenerators.for_keys(seeds[0], range(models), "eval")
        probabilities = predict(network, test_batch, label, noise, samples=20)
        for m, seed in enumerate(seeds):
            value = 100 * float(accuracy(probabilities[m], test_y))
            rows.append({"seed": seed, "mode": label, "accuracy": value})
    figure, axes = pyplot().subplots(1, models, figsize=(4.5 * models, 4), squeeze=False)
    with torch.no_grad():
        samples = network(test_batch, ForwardMode.LOCAL, generators, bottleneck=True)
    for m, seed in enumerate(seeds):
        for label in range(4):
            points = samples[m][test_y == label].numpy()
            axes[0, m].scatter(points[:, 0], points[:, 1], s=4, alpha=0.5, label=f"class {label}")
        axes[0, m].set(title=f"variance bottleneck, seed {seed}", xlabel="neuron 1")
        axes[0, m].set_ylabel("neuron 2")
        axes[0, m].legend(markerscale=3, loc="upper right")
    figure.tight_layout()
    save_figure(figure, out / "toy_bottleneck.png", dpi=110)
    return pd.DataFrame(rows).pivot(index="seed", columns="mode", values="accuracy")


# --- kappa criterion and pruning --------------------------------------------------------------


def lenet_kappa(model, layer_index: int, images: torch.Tensor, labels: torch.Tensor):
    """kappa (1, I, O) of dense layer ``layer_index`` of a LeNet5 on (images, labels)."""
    inputs = model.input_of(layer_index, images.unsqueeze(0))

    def head(b: torch.Tensor) -> torch.Tensor:
        return model.forward_from(layer_index + 1, model.after(layer_index, b), ForwardMode.MEAN)

    return dense_layer_kappa(model.layers[layer_index], inputs, head, labels)


class KappaCounter:
    """Epoch extra for the tracker: the count of log10 kappa > 1.5 of one layer (Neklyudov et al.
    2018 Fig. 4); keeps the kappa of the epochs in ``keep`` (those the histograms show, Neklyudov et
    al. 2018 Fig. 3) in ``store`` ({epoch: kappa as a flat float32 array}), which travels in a
    checkpoint."""

    def __init__(self, layer_index: int, images, labels, keep: set[int]) -> None:
        self.layer_index, self.images, self.labels, self.keep = layer_index, images, labels, keep
        self.store: dict[int, np.ndarray] = {}

    def __call__(self, epoch: int, model) -> dict[str, float]:
        kappa = lenet_kappa(model, self.layer_index, self.images, self.labels)
        if epoch in self.keep:
            self.store[epoch] = kappa[0].flatten().cpu().numpy().astype(np.float32)
        return {"kappa_above_1.5": int(count_above(kappa, 1.5)[0])}

    def state_dict(self) -> dict:
        return {"store": {int(e): torch.from_numpy(v) for e, v in self.store.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.store = {int(e): v.numpy() for e, v in state["store"].items()}


def histogram_epochs(epochs: int, eval_every: int) -> set[int]:
    """The first, middle and last tracked epoch (those the kappa histograms show)."""
    tracked = [e for e in range(1, epochs + 1) if e % eval_every == 0 or e == epochs]
    return {tracked[0], tracked[len(tracked) // 2], tracked[-1]}


def plot_kappa_histograms(store: dict, path: Path) -> None:
    figure, axis = pyplot().subplots(figsize=(6, 4))
    for epoch in sorted(store):
        values = np.log10(
            np.maximum(store[epoch], 1e-25)
        )  # Neklyudov et al. 2018 Fig. 3: kappa = 0 -> 1e-25
        axis.hist(values, bins=60, alpha=0.5, label=f"epoch {epoch}")
    axis.axvline(1.5, color="red", label="log10 kappa0 = 1.5")
    axis.set(
        xlabel="log10 kappa",
        ylabel="weights",
        title="kappa of dense1 (Neklyudov et al. 2018 Fig. 3)",
    )
    # outside the axes: loc="best" searches every histogram patch, over a second on a busy machine
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    figure.tight_layout()
    save_figure(figure, path, dpi=110)


def sparse_ensemble_study(
    model: nn.Module,
    layer_index: int,
    kappa: torch.Tensor,
    data: tuple[torch.Tensor, torch.Tensor],
    *,
    samples: int,
    seed: int,
) -> pd.DataFrame:
    """Accuracy of the ensemble on ``data`` (images, labels) with low-kappa weights set to means /
    zeros (Neklyudov et al. 2018 Fig. 5); ``samples`` passes, seeded by ``seed``."""
    images, labels = data
    layer = model.layers[layer_index]
    logs = np.log10(np.maximum(kappa.flatten().numpy(), 1e-25))
    thresholds = np.unique(np.quantile(logs, [0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0]))
    rows = []
    for log_threshold in thresholds:
        row = {"log10_threshold": float(log_threshold)}
        for replace in ("mean", "zero"):
            fraction = sparse_ensemble_masks(layer, kappa, 10.0**log_threshold, replace)
            value = accuracies(model, images, labels, samples, seed, ("ensemble",))
            row[f"ensemble_acc_{replace}"] = value["ensemble"]
            row["fraction_replaced"] = fraction
        clear_masks(layer)
        rows.append(row)
    return pd.DataFrame(rows)


def variance_pruning_study(
    model: nn.Module,
    layer_index: int,
    data: tuple[torch.Tensor, torch.Tensor],
    *,
    samples: int,
    seed: int,
) -> pd.DataFrame:
    """Ensemble accuracy on ``data`` (images, labels) after zeroing sigma below thresholds
    (Neklyudov et al. 2019 Fig. 5); ``samples`` passes, seeded by ``seed``."""
    images, labels = data
    layer = model.layers[layer_index]
    sigma = layer.weight_log_std.detach().exp().flatten().numpy()
    rows = []
    for share in (0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99):
        threshold = float(np.quantile(sigma, share)) if share > 0 else 0.0
        fraction = layer.prune_by_std(threshold)
        value = accuracies(model, images, labels, samples, seed, ("ensemble",))
        rows.append({"sigma_threshold": threshold, "sparsity": fraction, **value})
    clear_masks(layer)
    return pd.DataFrame(rows)


def plot_curves(frame: pd.DataFrame, x: str, ys: list[str], path: Path, title: str) -> None:
    figure, axis = pyplot().subplots(figsize=(6, 4))
    for column in ys:
        axis.plot(frame[x], frame[column], marker="o", label=column)
    axis.set(xlabel=x, title=title)
    axis.legend()
    figure.tight_layout()
    save_figure(figure, path, dpi=110)
