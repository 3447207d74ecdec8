"""The entries of a comparison on the user's own network: families and the usual baselines.

Every entry starts from the same initial network (per seed) and trains through ``vbnn.train``;
each then gives K predictive samples of the test inputs, (K, N, ...) network outputs (logits for
a classifier, means (K, N, 1) for a regressor) whose average is its predictive:

* a ``vbnn.FAMILIES`` name: ``vbnn.convert(copy, name)`` trained on the ELBO by Adam; K weight
  samples drawn from q (``vbnn.sample``, "weights" mode), p(y | x) = 1/K sum_k p(y | x, W_k)
  (Neklyudov et al. 2019 eq. 2);
* ``ivon``: ``vbnn.convert(copy, "mf")`` trained on the ELBO by IVON (``vbnn.IVON``, the
  natural-gradient variational online Newton step of Shen et al. 2024, at its own defaults);
  K weight samples as a family's; ``ivon-ensemble``: M such posteriors, each from its own initial
  weights, K samples each (an ensemble of variational posteriors);
* ``point``: the copy trained by maximum likelihood; one pass (K = 1);
* ``ensemble``: M point networks, each from its own initial weights and minibatch order (a deep
  ensemble, Lakshminarayanan et al. 2017); the K = M samples are the members' outputs, so the
  predictive is the average of the members' predictive distributions;
* ``mc-dropout``: the copy trained by maximum likelihood with its own ``nn.Dropout`` layers; K
  passes with those layers kept active at test time (Gal & Ghahramani 2016);
* ``laplace``: the point network, then a last-layer Kronecker-factored Laplace approximation
  through laplace-torch, its prior precision by marginal likelihood (``comparison.laplace``).

``point``, the ensemble's members and ``laplace``'s network stop early: a share
(``EntryRun.validation_fraction``) of the training examples, drawn per replicate, is held out,
and the network keeps the weights of its epoch of lowest validation NLL (``patience`` epochs
without improvement end the run; ``vbnn.train``). The variational entries train on every example
for every epoch, as their objective already holds the prior. A regressor's targets are
standardised on the training examples, y' = (y - mean) / std, for every entry; its predictive
means and noise std are mapped back (mean + std f', std sigma'), so every metric is in the
targets' own units.

Initial weights: with a function, the network of seed s is ``function()`` called under
``torch.manual_seed(s)``; with a module, a deep copy of it (its own weights). The ensemble's member
m > 0 draws fresh weights: ``function()`` under its own seed, or, for a module, every submodule's
``reset_parameters()`` under that seed; member 0 is the point network of the same seed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from vbnn.comparison.laplace import fit_laplace, laplace_package, laplace_samples, last_linear
from vbnn.core.batch_rule import Inputs, apply, predict, rows, take
from vbnn.core.contracts import ForwardMode
from vbnn.core.defaults import VALIDATION_FRACTION
from vbnn.core.randomness import ModelGenerators, derive_seed
from vbnn.layers.registry import FAMILIES
from vbnn.networks.conversion import convert
from vbnn.networks.predictive import sample
from vbnn.training.natural_gradient import IVON
from vbnn.training.trainer import train

DROPOUT = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


@dataclass(frozen=True)
class EntryKind:
    """How an entry trains and predicts (module docstring).

    Attributes:
        family: the ``vbnn.FAMILIES`` name its copy is converted to; None: the network as given,
            trained by maximum likelihood.
        optimizer: ``vbnn.train``'s optimiser ("adam" or "ivon").
        predictive: "posterior" (weight samples of q), "point" (one pass), "mc-dropout" or
            "laplace".
        ensemble: M members (``EntryRun.ensemble_size``) rather than one network.
        early_stopping: stopped on a validation split of the training examples.
    """

    family: str | None
    optimizer: str = "adam"
    predictive: str = "posterior"
    ensemble: bool = False
    early_stopping: bool = False


BASELINE_KINDS = {
    "point": EntryKind(None, predictive="point", early_stopping=True),
    "ensemble": EntryKind(None, predictive="point", ensemble=True, early_stopping=True),
    "mc-dropout": EntryKind(None, predictive="mc-dropout"),
    "laplace": EntryKind(None, predictive="laplace", early_stopping=True),
    "ivon": EntryKind("mf", optimizer="ivon"),
    "ivon-ensemble": EntryKind("mf", optimizer="ivon", ensemble=True),
}
BASELINES = tuple(BASELINE_KINDS)


def entry_kind(name: str) -> EntryKind:
    """The :class:`EntryKind` of entry ``name``: a baseline's, else family ``name`` by Adam."""
    return BASELINE_KINDS.get(name, EntryKind(name))


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
            ValueError: the function raises (its exception chained) or returns something other
                than an ``nn.Module``.
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
            try:
                network = self.network()
            except Exception as error:
                where = getattr(self.network, "__module__", None)
                name = f"{where}.{self.label}" if where else self.label
                raise ValueError(f"network: {name}() raised {type(error).__name__}: {error} (the "
                                 "function that builds the network)") from error  # fmt: skip
        if not isinstance(network, nn.Module):
            raise ValueError(
                f"network: {self.label}() returned {type(network).__name__}, not an nn.Module"
            )
        return network


def dropout_layers(network: nn.Module) -> list[str]:
    """Paths of the dropout layers of ``network``."""
    return [path for path, module in network.named_modules() if isinstance(module, DROPOUT)]


def check_entries(
    names: tuple[str, ...], network: nn.Module, example: Inputs, ensemble_size: int
) -> tuple[str, ...]:
    """The entries as given, each checked on ``network`` (an initial network) and ``example``
    (two training inputs) before training.

    Raises:
        ValueError: no entry, an unknown name (the known ones listed), a name given twice,
            ``mc-dropout`` on a network without dropout (the network named), an ensemble of fewer
            than two members, ``laplace`` without laplace-torch, on a mapping of inputs or on a
            network whose last layer is no ``nn.Linear``, or a family that cannot convert the
            network (``vbnn.convert``'s error, naming the layer).
    """
    if not names:
        raise ValueError("families: none given")
    known = [*FAMILIES, *(b for b in BASELINES if b not in FAMILIES)]
    for position, name in enumerate(names):
        if name not in known:
            raise ValueError(f"families[{position}]={name!r}: unknown; choose from {known}")
        if name in names[:position]:
            raise ValueError(f"families[{position}]={name!r}: given twice")
        kind = entry_kind(name)
        if kind.predictive == "mc-dropout" and not dropout_layers(network):
            raise ValueError(
                f"families[{position}]='mc-dropout': {type(network).__name__} has no dropout "
                f"layer (nn.Dropout, nn.Dropout2d, ...) to keep active at test time"
            )
        if kind.ensemble and ensemble_size < 2:
            raise ValueError(
                f"families[{position}]={name!r}: ensemble_size={ensemble_size}; an ensemble needs "
                "at least 2 members (one member is 'point', or 'ivon')"
            )
        try:
            if kind.predictive == "laplace":
                if not isinstance(example, torch.Tensor):
                    raise ValueError("laplace-torch takes tensor inputs, not a mapping of them")
                laplace_package()
                last_linear(copy.deepcopy(network), example)
            if kind.family is not None:
                convert(network, kind.family)
        except ValueError as error:
            raise ValueError(f"families[{position}]={name!r}: {error}") from error
    return tuple(names)


@dataclass(frozen=True)
class EntryRun:
    """One entry's settings, stored with its results (``method`` is the entry's name).

    ``patience`` None: no early stopping (every example trains); ``device`` None: the network's
    own device; ``ivon``: the IVON settings of an entry IVON trains (None: ``vbnn.IVON()``; the
    network form stores them with its runs, so a run of other IVON values is never read back as
    today's)."""

    method: str
    epochs: int
    batch_size: int | None
    learning_rate: float
    samples: int
    ensemble_size: int
    seed: int
    patience: int | None = None
    validation_fraction: float = VALIDATION_FRACTION
    standardize: bool = True
    device: str | None = None
    ivon: IVON | None = None


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
def _passes(network: nn.Module, x: Inputs, count: int, batch_size: int) -> torch.Tensor:
    """``count`` forward passes of ``network`` as it stands (its train/eval state), ``batch_size``
    examples at a time, their predictions by the batch rule: (count, N, ...)."""
    x = apply(x, lambda values: values.to(_device(network)))
    starts = range(0, rows(x), batch_size)
    return torch.stack(
        [
            torch.cat([predict(network, take(x, slice(s, s + batch_size))) for s in starts])
            for _ in range(count)
        ]
    ).cpu()


def predictive_samples(
    predictive: str, network: nn.Module, x: Inputs, run: EntryRun, seed: int
) -> torch.Tensor:
    """K outputs (K, N, ...) of a trained network whose predictive is ``predictive``
    (``EntryKind.predictive``; not "laplace": ``comparison.laplace.laplace_samples``)."""
    network.eval()
    batch = run.batch_size or rows(x)
    if predictive == "point":
        return _passes(network, x, 1, batch)
    if predictive == "mc-dropout":
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
    inputs = apply(x, lambda values: values.to(_device(network)))
    return sample(network, inputs, run.samples, ForwardMode.WEIGHTS, batch, noise).cpu()


def _members(kind: EntryKind, run: EntryRun) -> list[tuple[int, bool]]:
    """(seed key, fresh weights) of each network the entry trains."""
    if kind.ensemble:
        return [(m, m > 0) for m in range(run.ensemble_size)]
    return [(0, False)]


def validation_split(
    data: tuple[Inputs, torch.Tensor], fraction: float, seed: int
) -> tuple[tuple[Inputs, torch.Tensor], tuple[Inputs, torch.Tensor]]:
    """(training, validation) examples: ``round(fraction N)`` of them (at least one, leaving one)
    drawn by a generator seeded with ``seed`` as the validation examples.

    Raises:
        ValueError: fewer than two examples.
    """
    x, y = data
    if len(y) < 2:
        raise ValueError(f"early stopping: {len(y)} training example(s); it holds out at least one")
    held = min(max(1, round(fraction * len(y))), len(y) - 1)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    kept, out = order[held:].sort().values, order[:held].sort().values
    return (take(x, kept), y[kept]), (take(x, out), y[out])


@dataclass(frozen=True)
class Standardizer:
    """y' = (y - mean) / std of a regressor's training targets (std 1 for constant targets)."""

    mean: float = 0.0
    std: float = 1.0

    @classmethod
    def of(cls, y: torch.Tensor) -> Standardizer:
        std = float(y.double().std()) if len(y) > 1 else 0.0
        return cls(float(y.double().mean()), std if std > 0 else 1.0)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return (y - self.mean) / self.std

    def means(self, f: torch.Tensor) -> torch.Tensor:
        return f * self.std + self.mean


def train_entry(
    source: NetworkSource,
    run: EntryRun,
    replicate: int,
    train_data: tuple[Inputs, torch.Tensor],
    test_x: Inputs,
    ood_x: Inputs | None,
    regression: bool,
) -> Trained:
    """Train entry ``run.method`` on one replicate (module docstring) and draw its predictive
    samples; every seed derives from (``run.seed``, ``replicate``, the member). ``seconds``
    counts the training steps and the Laplace fit, not the predictive passes."""
    kind = entry_kind(run.method)
    base = derive_seed(run.seed, replicate, "init")
    scale = Standardizer.of(train_data[1]) if regression and run.standardize else Standardizer()
    data = (train_data[0], scale.forward(train_data[1]) if regression else train_data[1])
    held = None
    if kind.early_stopping and run.patience is not None:
        data, held = validation_split(data, run.validation_fraction,
                                      derive_seed(run.seed, replicate, "validation"))  # fmt: skip
    device = None if run.device is None else torch.device(run.device)
    tests, oods, stds, seconds = [], [], [], 0.0
    for member, fresh in _members(kind, run):
        seed = base if member == 0 else derive_seed(base, member, "init")
        network = source.draw(seed, fresh)
        if kind.family is not None:
            network = convert(network, kind.family)
        result = train(
            network,
            data,
            objective="elbo" if kind.family is not None else "likelihood",
            epochs=run.epochs,
            batch_size=run.batch_size,
            learning_rate=run.learning_rate,
            validation=held,
            patience=None if held is None else run.patience,
            device=device,
            seed=derive_seed(seed, 0, "train"),
            progress=False,
            optimizer=(run.ivon or IVON()) if kind.optimizer == "ivon" else kind.optimizer,
        )
        seconds += result.seconds
        noise_std = torch.ones(1, 1, dtype=torch.float64)  # a classifier's: unused
        if regression:
            noise_std = result.likelihood.std().detach().cpu().reshape(1, 1).double() * scale.std
        evaluation = derive_seed(seed, 0, "eval")
        draw: Callable[[torch.Tensor], torch.Tensor]
        if kind.predictive == "laplace":
            start = time.perf_counter()
            approximation = fit_laplace(result.network, data, regression,
                                        float(noise_std) / scale.std, run.batch_size)  # fmt: skip
            seconds += time.perf_counter() - start
            draw = partial(laplace_samples, approximation, samples=run.samples,
                           batch_size=run.batch_size, seed=evaluation, regression=regression,
                           device=_device(result.network))  # fmt: skip
        else:
            draw = partial(predictive_samples, kind.predictive, result.network, run=run,
                           seed=evaluation)  # fmt: skip
        tests.append(draw(test_x))
        if ood_x is not None:
            oods.append(draw(ood_x))
        if regression:
            tests[-1] = scale.means(tests[-1])
            stds.append(noise_std.expand(len(tests[-1]), 1))
    return Trained(
        test=torch.cat(tests),
        ood=torch.cat(oods) if oods else None,
        noise_std=torch.cat(stds) if regression else None,
        seconds=seconds,
    )
