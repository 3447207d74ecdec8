"""The entries of a comparison on the user's own network: families and the usual baselines.

Every entry starts from the same initial network (per seed) and trains through ``vbnn.train``;
each then gives K predictive samples of the test inputs, (K, N, ...) network outputs (logits for
a classifier, means (K, N, 1) for a regressor) whose average is its predictive:

* a ``vbnn.FAMILIES`` name: ``vbnn.convert(copy, name)`` trained on the ELBO; K weight samples
  drawn from q (``vbnn.sample``, "weights" mode), p(y | x) = 1/K sum_k p(y | x, W_k)
  (Neklyudov et al. 2019 eq. 2);
* ``point``: the copy trained by maximum likelihood; one pass (K = 1);
* ``ensemble``: M point networks, each from its own initial weights and minibatch order (a deep
  ensemble, Lakshminarayanan et al. 2017); the K = M samples are the members' outputs, so the
  predictive is the average of the members' predictive distributions;
* ``mc-dropout``: the copy trained by maximum likelihood with its own ``nn.Dropout`` layers; K
  passes with those layers kept active at test time (Gal & Ghahramani 2016).

Initial weights: with a function, the network of seed s is ``function()`` called under
``torch.manual_seed(s)``; with a module, a deep copy of it (its own weights). The ensemble's member
m > 0 draws fresh weights: ``function()`` under its own seed, or, for a module, every submodule's
``reset_parameters()`` under that seed; member 0 is the point network of the same seed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators, derive_seed
from vbnn.layers.registry import FAMILIES
from vbnn.networks.conversion import convert
from vbnn.networks.predictive import sample
from vbnn.training.trainer import train

BASELINES = ("point", "ensemble", "mc-dropout")
DROPOUT = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


@dataclass(frozen=True)
class NetworkSource:
    """Where each entry's initial network comes from: a module (deep-copied) or a function of
    no arguments returning one (called under a seed)."""

    network: nn.Module | Callable[[], nn.Module]

    @property
    def label(self) -> str:
        if isinstance(self.network, nn.Module):
            return type(self.network).__name__
        return getattr(self.network, "__name__", type(self.network).__name__)

    def draw(self, seed: int, fresh: bool = False) -> nn.Module:
        """The initial network of ``seed`` (module docstring); ``fresh``: new weights even for a
        module (an ensemble member).

        Raises:
            ValueError: the function returns something other than an ``nn.Module``.
        """
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if isinstance(self.network, nn.Module):
                network = copy.deepcopy(self.network)
                if fresh:
                    for module in network.modules():
                        if callable(getattr(module, "reset_parameters", None)):
                            module.reset_parameters()
                return network
            network = self.network()
        if not isinstance(network, nn.Module):
            raise ValueError(
                f"network: {self.label}() returned {type(network).__name__}, not an nn.Module"
            )
        return network


def dropout_layers(network: nn.Module) -> list[str]:
    """Paths of the dropout layers of ``network``."""
    return [path for path, module in network.named_modules() if isinstance(module, DROPOUT)]


def check_entries(names: tuple[str, ...], network: nn.Module) -> tuple[str, ...]:
    """The entries as given, each checked on ``network`` (an initial network) before training.

    Raises:
        ValueError: no entry, an unknown name (the known ones listed), a name given twice,
            ``mc-dropout`` on a network without dropout (the network named), or a family that
            cannot convert the network (``vbnn.convert``'s error, naming the layer).
    """
    if not names:
        raise ValueError("families: none given")
    known = [*FAMILIES, *(b for b in BASELINES if b not in FAMILIES)]
    for position, name in enumerate(names):
        if name not in known:
            raise ValueError(f"families[{position}]={name!r}: unknown; choose from {known}")
        if name in names[:position]:
            raise ValueError(f"families[{position}]={name!r}: given twice")
        if name == "mc-dropout" and not dropout_layers(network):
            raise ValueError(
                f"families[{position}]='mc-dropout': {type(network).__name__} has no dropout "
                f"layer (nn.Dropout, nn.Dropout2d, ...) to keep active at test time"
            )
        if name not in BASELINES:
            try:
                convert(network, name)
            except ValueError as error:
                raise ValueError(f"families[{position}]={name!r}: {error}") from error
    return tuple(names)


@dataclass(frozen=True)
class EntryRun:
    """One entry's settings, stored with its results (``method`` is the entry's name)."""

    method: str
    epochs: int
    batch_size: int | None
    learning_rate: float
    samples: int
    ensemble_size: int
    seed: int


@dataclass(frozen=True)
class Trained:
    """An entry trained on one replicate: K predictive samples of the test inputs (and of the
    out-of-distribution inputs), the noise std of each sample (regression), training seconds."""

    test: torch.Tensor
    ood: torch.Tensor | None
    noise_std: torch.Tensor | None
    seconds: float


def _device(network: nn.Module) -> torch.device:
    parameter = next(network.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


@torch.no_grad()
def _passes(network: nn.Module, x: torch.Tensor, count: int, batch_size: int) -> torch.Tensor:
    """``count`` forward passes of ``network`` as it stands (its train/eval state), ``batch_size``
    examples at a time: (count, N, ...)."""
    x = x.to(_device(network))
    return torch.stack(
        [
            torch.cat([network(x[s : s + batch_size]) for s in range(0, len(x), batch_size)])
            for _ in range(count)
        ]
    ).cpu()


def predictive_samples(
    name: str, network: nn.Module, x: torch.Tensor, run: EntryRun, seed: int
) -> torch.Tensor:
    """K outputs (K, N, ...) of a trained network of entry ``name`` (not ``ensemble``: its
    samples are the members' :func:`predictive_samples` as ``point``)."""
    network.eval()
    batch = run.batch_size or len(x)
    if name == "point":
        return _passes(network, x, 1, batch)
    if name == "mc-dropout":
        for module in network.modules():
            if isinstance(module, DROPOUT):
                module.train()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return _passes(network, x, run.samples, batch)
        finally:
            network.eval()
    noise = ModelGenerators([seed], _device(network))
    return sample(
        network, x.to(_device(network)), run.samples, ForwardMode.WEIGHTS, batch, noise
    ).cpu()


def _members(name: str, run: EntryRun) -> list[tuple[int, bool]]:
    """(seed key, fresh weights) of each network the entry trains."""
    if name == "ensemble":
        return [(m, m > 0) for m in range(run.ensemble_size)]
    return [(0, False)]


def train_entry(
    source: NetworkSource,
    run: EntryRun,
    replicate: int,
    train_data: tuple[torch.Tensor, torch.Tensor],
    test_x: torch.Tensor,
    ood_x: torch.Tensor | None,
    regression: bool,
) -> Trained:
    """Train entry ``run.method`` on one replicate (module docstring) and draw its predictive
    samples; every seed derives from (``run.seed``, ``replicate``, the member)."""
    name = run.method
    base = derive_seed(run.seed, replicate, "init")
    tests, oods, stds, seconds = [], [], [], 0.0
    for member, fresh in _members(name, run):
        seed = base if member == 0 else derive_seed(base, member, "init")
        network = source.draw(seed, fresh)
        if name not in BASELINES:
            network = convert(network, name)
        objective = "elbo" if name not in BASELINES else "likelihood"
        result = train(
            network,
            train_data,
            objective=objective,
            epochs=run.epochs,
            batch_size=run.batch_size,
            learning_rate=run.learning_rate,
            seed=derive_seed(seed, 0, "train"),
            progress=False,
        )
        seconds += result.seconds
        kind = "point" if name == "ensemble" else name
        evaluation = derive_seed(seed, 0, "eval")
        tests.append(predictive_samples(kind, result.network, test_x, run, evaluation))
        if ood_x is not None:
            oods.append(predictive_samples(kind, result.network, ood_x, run, evaluation))
        if regression:
            std = result.likelihood.std().detach().cpu().reshape(1, 1).double()
            stds.append(std.expand(len(tests[-1]), 1))
    return Trained(
        test=torch.cat(tests),
        ood=torch.cat(oods) if oods else None,
        noise_std=torch.cat(stds) if regression else None,
        seconds=seconds,
    )
