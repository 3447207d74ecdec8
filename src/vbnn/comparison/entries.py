"""The entries of a comparison on the user's own network: families and the usual baselines.

Every entry starts from the same initial network (per seed) and trains through ``vbnn.train``
as its method says (``vbnn.methods``: the ``METHODS`` table of every family and baseline); each
then gives K predictive samples of the test inputs, (K, N, ...) network outputs (logits for a
classifier, means (K, N, 1) for a regressor) whose average is its predictive.

A method that stops early (``point``, the ensemble's members, ``laplace``'s network) holds
out a share (``EntryRun.validation_fraction``) of the training examples, drawn per replicate,
and keeps the weights of its epoch of lowest validation NLL (``patience`` epochs without
improvement end the run; ``vbnn.train``). The variational entries train on every example for
every epoch, as their objective already holds the prior. A temperature-scaled entry
(``NAME+ts``) holds the same share out to fit its temperature (``methods.temperature``). A
regressor's targets are standardised on the training examples, y' = (y - mean) / std, for every
entry; its predictive means and noise std are mapped back (mean + std f', std sigma'), so every
metric is in the targets' own units. A regression network with two outputs
(``EntryRun.heteroscedastic``) trains with ``HeteroscedasticGaussianLikelihood``: each sample's
outputs are a mean and a log std per input, sigma_k(x) = std exp(s_k(x)) in the targets' units.

Initial weights: with a function, the network of seed s is ``function()`` called under
``torch.manual_seed(s)``; with a module, a deep copy of it (its own weights). The ensemble's member
m > 0 draws fresh weights: ``function()`` under its own seed, or, for a module, every submodule's
``reset_parameters()`` under that seed; member 0 is the point network of the same seed. An
adapter ensemble's members (``lora-ensemble``) all start from the network of the replicate's seed,
the pretrained one; each draws its own adapter (its initial A from torch's global RNG seeded
per member) and minibatch order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vbnn.core.batch_rule import Inputs, take
from vbnn.core.defaults import VALIDATION_FRACTION
from vbnn.core.randomness import derive_seed
from vbnn.methods.base import Fitted, Method
from vbnn.methods.registry import METHODS, method
from vbnn.methods.temperature import TemperatureScaled, scale_samples
from vbnn.networks.adapter import LoRA
from vbnn.training.likelihoods import HeteroscedasticGaussianLikelihood
from vbnn.training.natural_gradient import IVON
from vbnn.training.trainer import train


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
                raise ValueError(
                    f"network: {name}() raised {type(error).__name__}: {error} (the "
                    "function that builds the network)"
                ) from error
        if not isinstance(network, nn.Module):
            raise ValueError(
                f"network: {self.label}() returned {type(network).__name__}, not an nn.Module"
            )
        return network


def check_entries(
    names: tuple[str, ...], network: nn.Module, example: Inputs, run_of: Callable[[str], EntryRun]
) -> tuple[str, ...]:
    """The entries as given, each checked on ``network`` (an initial network) and ``example``
    (two training inputs) with its settings ``run_of(name)`` before training (``Method.check``).

    Raises:
        ValueError: no entry, an unknown name (the known ones listed), a name given twice, a
            method that trains no network (the UCI engine's ``es``, ``map``, ``sgld``), or one
            that cannot run on this network (``mc-dropout`` without dropout, an ensemble of fewer
            than two members, ``laplace`` without laplace-torch or a last ``nn.Linear``, a family
            or an adapter that cannot convert it: ``vbnn.convert``'s error, naming the layer or
            the LoRA target).
    """
    if not names:
        raise ValueError("families: none given")
    for position, name in enumerate(names):
        try:
            chosen = method(name)
        except ValueError:
            known = [n for n, m in METHODS.items() if m.network]
            raise ValueError(
                f"families[{position}]={name!r}: unknown; choose from {known} (or "
                "NAME+ts: temperature-scaled)"
            ) from None
        if name in names[:position]:
            raise ValueError(f"families[{position}]={name!r}: given twice")
        base = chosen.base if isinstance(chosen, TemperatureScaled) else chosen
        try:
            if not base.network:
                raise ValueError(
                    f"{base.summary}: trains on a regression table only, not a network (on a "
                    "network: 'point', or vbnn.train(objective=...))"
                )
            base.check(network, example, run_of(name))
        except ValueError as error:
            raise ValueError(f"families[{position}]={name!r}: {error}") from error
    return tuple(names)


@dataclass(frozen=True)
class EntryRun:
    """One entry's settings, stored with its results (``method`` is the entry's name).

    ``patience`` None: no early stopping (every example trains); ``device`` None: the network's
    own device; ``ivon``: the IVON settings of an entry IVON trains (None: ``vbnn.IVON()``; the
    network form stores them with its runs, so a run of other IVON values is never read back as
    today's); ``adapter``: the ``vbnn.LoRA`` of an adapter entry (None: ``vbnn.LoRA()``; stored
    the same way); ``heteroscedastic``: a regression network's two outputs are a mean and a log
    std (module docstring)."""

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
    adapter: LoRA | None = None
    heteroscedastic: bool = False


@dataclass(frozen=True)
class Trained:
    """An entry trained on one replicate: K predictive samples of the test inputs (and of the
    out-of-distribution inputs, and of each shifted copy of the test inputs by its name), the
    noise std of each sample (regression: (K, 1), or (K, N) per input for a heteroscedastic
    network), training seconds."""

    test: torch.Tensor
    ood: torch.Tensor | None
    noise_std: torch.Tensor | None
    seconds: float
    shifted: dict[Any, torch.Tensor] = field(default_factory=dict)


def _members(chosen: Method, run: EntryRun) -> list[tuple[int, bool]]:
    """(seed key, fresh weights) of each network the entry trains; an adapter ensemble's members
    share the pretrained network (``Method.pretrained``)."""
    if chosen.ensemble:
        return [(m, m > 0 and not chosen.pretrained) for m in range(run.ensemble_size)]
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


# Parameters: one unit's replicate: the network's source, its settings and its data
def train_entry(
    source: NetworkSource,
    run: EntryRun,
    replicate: int,
    train_data: tuple[torch.Tensor, torch.Tensor],
    test_x: Inputs,
    ood_x: Inputs | None,
    regression: bool,
    shifted: Callable[[Inputs], Iterator[tuple[Any, Inputs]]] | None = None,
) -> Trained:
    """Train entry ``run.method`` on one replicate (module docstring) and draw its predictive
    samples; every seed derives from (``run.seed``, ``replicate``, the member). ``seconds``
    counts the training steps and a post-hoc fit (Laplace's), not the predictive passes.

    ``shifted``: test inputs -> (name, shifted copy) pairs (``comparison.shifts``); each
    member draws on every copy, made again per member so that one copy is held at a time."""
    chosen = method(run.method)
    scaled = isinstance(chosen, TemperatureScaled)
    base = chosen.base if scaled else chosen
    stops = base.early_stopping and run.patience is not None
    scale, data, held = _training_data(run, replicate, train_data, regression, scaled or stops)
    stopping = held if stops else None
    inputs = [test_x, ood_x, held[0] if scaled else None]
    parts: list[list[torch.Tensor]] = [[], [], []]
    named: dict[Any, list[torch.Tensor]] = {}
    stds, seconds = [], 0.0
    seed_of_init = derive_seed(run.seed, replicate, "init")
    for member, fresh in _members(base, run):
        seed = seed_of_init if member == 0 else derive_seed(seed_of_init, member, "init")
        initial = source.draw(seed_of_init if base.pretrained else seed, fresh)
        fitted, trained_seconds, noise_std = _train_member(
            base, initial, data, stopping, run, seed, regression, scale
        )
        draw, fit_seconds = base.predictor(fitted, run, derive_seed(seed, 0, "eval"))
        seconds += trained_seconds + fit_seconds
        for part, x in zip(parts, inputs, strict=True):
            if x is not None:
                part.append(draw(x))
        for name, x in shifted(test_x) if shifted is not None else ():
            samples = draw(x)
            named.setdefault(name, []).append(scale.means(samples) if regression else samples)
        if regression:
            parts[0][-1], std = _regression_samples(parts[0][-1], noise_std, scale, run)
            stds.append(std)
    test, ood = torch.cat(parts[0]), torch.cat(parts[1]) if parts[1] else None
    copies = {name: torch.cat(samples) for name, samples in named.items()}
    if scaled:
        _, (test, ood, *rest) = scale_samples(
            torch.cat(parts[2]), held[1], test, ood, *copies.values()
        )
        copies = dict(zip(copies, rest, strict=True))
    return Trained(
        test=test,
        ood=ood,
        noise_std=torch.cat(stds) if regression else None,
        seconds=seconds,
        shifted=copies,
    )


def _training_data(
    run: EntryRun,
    replicate: int,
    train_data: tuple[Inputs, torch.Tensor],
    regression: bool,
    holds_out: bool,
) -> tuple[Standardizer, tuple[Inputs, torch.Tensor], tuple[Inputs, torch.Tensor] | None]:
    """A regressor's target scale, the examples the entry trains on (a regressor's targets
    standardised) and, with ``holds_out``, the replicate's held-out share of them."""
    scale = Standardizer.of(train_data[1]) if regression and run.standardize else Standardizer()
    data = (train_data[0], scale.forward(train_data[1]) if regression else train_data[1])
    if not holds_out:
        return scale, data, None
    seed = derive_seed(run.seed, replicate, "validation")
    data, held = validation_split(data, run.validation_fraction, seed)
    return scale, data, held


def _regression_samples(
    outputs: torch.Tensor, noise_std: torch.Tensor, scale: Standardizer, run: EntryRun
) -> tuple[torch.Tensor, torch.Tensor]:
    """Means (K, N, 1) and noise stds, (K, 1), or (K, N) for a heteroscedastic network, of K
    samples of a regressor's outputs (K, N, 1 or 2), in the targets' units."""
    if not run.heteroscedastic:
        return scale.means(outputs), noise_std.expand(len(outputs), 1)
    stds = HeteroscedasticGaussianLikelihood().std(outputs).double() * scale.std
    return scale.means(outputs[..., :1]), stds


# Parameters: one member of ``train_entry``: the method, its network and data, the run's settings
def _train_member(
    chosen: Method,
    network: nn.Module,
    data: tuple[Inputs, torch.Tensor],
    held: tuple[Inputs, torch.Tensor] | None,
    run: EntryRun,
    seed: int,
    regression: bool,
    scale: Standardizer,
) -> tuple[Fitted, float, torch.Tensor]:
    """``network`` prepared and trained as ``chosen`` says: the trained member, its training
    seconds and (a regressor's) noise std in the targets' units, (1, 1) (1 for a heteroscedastic
    network, whose stds are its outputs)."""
    # what the preparation draws (an adapter's initial A, the spread of a variance layer's log
    # sigma) comes from torch's RNG seeded by the member's seed, not from the caller's state
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, 0, "init"))
        network = chosen.prepare(network, run)
    options = {"learning_rate": run.learning_rate, **chosen.train_options(run, network)}
    if run.heteroscedastic:
        options["likelihood"] = HeteroscedasticGaussianLikelihood()
    result = train(
        network,
        data,
        objective=chosen.objective,
        epochs=run.epochs,
        batch_size=run.batch_size,
        validation=held,
        patience=None if held is None else run.patience,
        device=None if run.device is None else torch.device(run.device),
        seed=derive_seed(seed, 0, "train"),
        progress=False,
        **options,
    )
    noise_std = torch.ones(1, 1, dtype=torch.float64)  # a classifier's, a heteroscedastic one's
    if regression and not run.heteroscedastic:
        noise_std = result.likelihood.std().detach().cpu().reshape(1, 1).double() * scale.std
    callbacks = tuple(options.get("callbacks", ()))
    fitted = Fitted(result.network, data, regression, float(noise_std) / scale.std, callbacks)
    return fitted, result.seconds, noise_std
