"""``vbnn.compare(network, (x, y), ...)``: families and baselines on the user's own network.

The data are tensors or arrays (or a ``torch.utils.data.Dataset`` of (x, y) pairs, stacked), or
a mapping of them holding the target (a tokenizer's output with its "labels", split by the
network's batch rule, ``core.batch_rule``). Floating inputs take the network's dtype; integer
inputs stay integers (token ids) in a mapping or for a network holding an ``nn.Embedding``, and
take the network's dtype otherwise (integer features). The task follows the targets:
integer classes 0 .. C-1 make a classification (the network's
output is C logits), floating targets a regression (one output, a learned Gaussian noise; or
two, a mean and a log std per input: ``HeteroscedasticGaussianLikelihood``). The
replicates are the seeds when ``test=`` is given (each seed trains on all of (x, y) and tests on
``test``), else the (fold, seed) pairs of K folds or given splits. Every (entry, replicate) is a
row of the results database (trained through ``sweeps.driver``) under a name that hashes the
network (its architecture and initial weights), the data, the replicates and the settings.

Scores per replicate (``score``): every metric of the table in ``comparison.scores`` (a
classifier's test log-likelihood, accuracy, ECE, Brier and AURC of the predictive p(y | x) =
1/K sum_k softmax(f_k(x))); with
out-of-distribution inputs, AUROC, AUPR and FPR at 95 % TPR of the predictive entropy and of the
mutual information (``vbnn.metrics``; out-of-distribution inputs positive; NaN for the mutual
information of ``point``, which has one sample); regression test log-likelihood of the mixture
1/K sum_k N(f_k(x), sigma_k^2) (sigma_k(x) per input for two outputs), the RMSE of its mean and
the coverage of its central interval.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from vbnn.comparison.classification import fold_metrics
from vbnn.comparison.config import NetworkConfig
from vbnn.comparison.entries import (
    EntryRun,
    NetworkSource,
    Trained,
    check_entries,
    train_entry,
)
from vbnn.comparison.folds import (
    Split,
    Task,
    check_splits,
    data_key,
    k_folds,
    warn_unseen_classes,
)
from vbnn.comparison.scores import regression_scores
from vbnn.comparison.shifts import ShiftedTests, shift_key
from vbnn.core.batch_rule import (
    DEFAULT_RULE,
    BatchRule,
    Inputs,
    apply,
    batch_rule,
    predict,
    split_batch,
    take,
)
from vbnn.core.batch_rule import rows as examples_of
from vbnn.core.contracts import SplitResult
from vbnn.core.randomness import derive_seed
from vbnn.methods.base import PredictiveKind
from vbnn.methods.registry import base_method
from vbnn.methods.temperature import SUFFIX
from vbnn.metrics import (
    mutual_information,
    out_of_distribution,
    predictive_entropy,
)
from vbnn.networks.predictive import class_probabilities, predictive_probabilities
from vbnn.sweeps.contracts import Unit
from vbnn.sweeps.driver import Runs, UnitBuilder

DEFAULT_ENTRIES = {
    Task.CLASSIFICATION: ("mf", "ivon", "point", "ensemble"),
    Task.REGRESSION: ("mf", "ivon", "point", "ensemble"),
}
SCORES = ("entropy", "mutual_information")


def as_tensors(data: Any, name: str, rule: BatchRule = DEFAULT_RULE) -> tuple[Inputs, torch.Tensor]:
    """(x (N, ...), y (N,)) of a pair of tensors or arrays, of a Dataset of (x, y) pairs, or of a
    mapping of them split by ``rule`` (x then the mapping of the other entries).

    Raises:
        ValueError: not a pair, x and y of different lengths, no example, a non-finite input or
            target (its position named), targets that are not one per example.
    """
    if isinstance(data, Dataset):
        pairs = [data[i] for i in range(len(data))]  # type: ignore[arg-type]
        if not pairs:
            raise ValueError(f"{name}: the dataset is empty")
        x = torch.stack([torch.as_tensor(p[0]) for p in pairs])
        y = torch.stack([torch.as_tensor(p[1]) for p in pairs])
    elif isinstance(data, Mapping):
        inputs, target = split_batch(data, rule, name)
        x = apply(inputs, lambda part: torch.as_tensor(np.asarray(part)))
        y = torch.as_tensor(np.asarray(target))
    elif isinstance(data, tuple | list) and len(data) == 2:
        x, y = (torch.as_tensor(np.asarray(part)) for part in data)
    else:
        raise ValueError(
            f"{name}: expected (x, y), a mapping holding the target "
            f"{rule.target!r} or a Dataset of (x, y) pairs, got "
            f"{type(data).__name__}"
        )
    if examples_of(x) != len(y):
        raise ValueError(f"{name}: x has {examples_of(x)} examples, y has {len(y)}")
    if len(y) == 0:
        raise ValueError(f"{name}: no examples")
    if y.dim() != 1:
        raise ValueError(f"{name}: y must hold one target per example (N,), got {tuple(y.shape)}")
    _check_finite(y, f"{name}: y")
    apply(x, lambda values: _check_finite(values, f"{name}: x"))
    return x, y


def _check_finite(values: torch.Tensor, name: str) -> torch.Tensor:
    """``values``; ValueError naming the first NaN or inf."""
    if values.is_floating_point() and not torch.isfinite(values).all():
        bad = tuple(int(i) for i in (~torch.isfinite(values)).nonzero()[0])
        raise ValueError(f"{name}{list(bad)} is {values[bad].item()}")
    return values


def _inputs(data: Any, name: str) -> Inputs:
    """Inputs without targets (the out-of-distribution ones), checked finite."""
    x = apply(data, lambda part: torch.as_tensor(np.asarray(part)))
    return apply(x, lambda values: _check_finite(values, name))


def network_inputs(x: Inputs, network: nn.Module, dtype: torch.dtype) -> Inputs:
    """``x`` as the comparison hands it to ``network`` (module docstring): floating tensors in
    ``dtype``; integer ones kept in a mapping or for a network holding an ``nn.Embedding``, else
    in ``dtype``."""
    keep = isinstance(x, Mapping) or any(isinstance(m, nn.Embedding) for m in network.modules())
    return apply(
        x, lambda values: values if keep and not values.is_floating_point() else values.to(dtype)
    )


def _shapes(x: Inputs) -> Any:
    """The shape of an example of ``x`` (of each tensor of a mapping)."""
    if isinstance(x, Mapping):
        return {key: tuple(value.shape[1:]) for key, value in x.items()}
    return tuple(x.shape[1:])


def _arrays(x: Inputs) -> list[np.ndarray]:
    """The arrays of ``x`` (of each tensor of a mapping, in key order) that key the data."""
    if isinstance(x, Mapping):
        return [x[key].numpy() for key in sorted(x)]
    return [x.numpy()]


def network_key(network: nn.Module) -> str:
    """16 hex digits of SHA-256 over the network's architecture (its repr) and initial weights
    (its state dict, as saved by ``torch.save``)."""
    digest = hashlib.sha256(repr(network).encode())
    for key, value in network.state_dict().items():
        digest.update(key.encode())
        buffer = io.BytesIO()
        torch.save(value.detach().cpu(), buffer)
        digest.update(buffer.getvalue())
    return digest.hexdigest()[:16]


def _check_output(network: nn.Module, x: Inputs, y: torch.Tensor, task: Task) -> bool:
    """A pass of the initial network on two examples: its output (the batch rule's prediction)
    must fit the task. Returns whether it is a heteroscedastic regressor (two outputs)."""
    network.eval()
    first = take(x, slice(0, 2))
    with torch.no_grad():
        output = predict(network, first)
    label = type(network).__name__
    rows = examples_of(first)
    if task is Task.REGRESSION and tuple(output.shape) not in ((rows, 1), (rows, 2)):
        raise ValueError(
            f"network: {label} gives {tuple(output.shape)} for {rows} examples; a regression "
            "needs one output (N, 1), or two (N, 2): a mean and a log std"
        )
    if task is Task.CLASSIFICATION:
        if output.dim() != 2:
            raise ValueError(
                f"network: {label} gives {tuple(output.shape)}; a classifier gives logits (N, C)"
            )
        if int(y.min()) < 0 or int(y.max()) >= output.shape[1]:
            raise ValueError(
                f"y: classes {int(y.min())} .. {int(y.max())} do not fit the "
                f"{output.shape[1]} logits of {label}"
            )
    return task is Task.REGRESSION and output.shape[1] == 2


def score(trained: Trained, y: torch.Tensor, task: Task, level: float) -> dict[str, float]:
    """The metrics of one replicate (module docstring) from the entry's predictive samples."""
    if task is Task.REGRESSION:
        means, stds = trained.test.double().squeeze(-1), trained.noise_std
        scores = regression_scores(means, stds, y.double(), level)
        return {"test_log_likelihood": scores.pop("log_likelihood"), **scores}
    metrics = fold_metrics(predictive_probabilities(trained.test), y)
    if trained.ood is not None:
        probabilities = class_probabilities(trained.test)
        outside = class_probabilities(trained.ood)
        for name, function in zip(SCORES, (predictive_entropy, mutual_information), strict=True):
            if function is mutual_information and len(probabilities) == 1:
                values = dict.fromkeys(("AUROC", "AUPR", "FPR95"), math.nan)
            else:
                values = out_of_distribution(function(probabilities), function(outside))
            metrics |= {f"{name} {k}": v for k, v in values.items()}
    return metrics


@dataclass(frozen=True)
class Replicates:
    """Every replicate's examples: per id, (training rows of (x, y), test rows of (x, y), or None
    for all of ``test``). Each replicate draws its own seeds from its id."""

    ids: tuple[int, ...]
    rows: tuple[tuple[np.ndarray, np.ndarray | None], ...]
    over: str


def replicates(
    y: torch.Tensor,
    test: tuple[Inputs, torch.Tensor] | None,
    seeds: int,
    folds: int | None,
    splits: Sequence[Split] | None,
    task: Task,
    seed: int,
) -> Replicates:
    """The seeds (with ``test``) or the (fold, seed) pairs of the folds or splits."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds={seeds!r}: need an integer >= 1")
    if test is not None:
        if splits is not None or folds is not None:
            raise ValueError("test: give test=(x, y) or folds=K or splits=..., not both")
        rows = tuple((np.arange(len(y)), None) for _ in range(seeds))
        return Replicates(tuple(range(seeds)), rows, "seeds")
    target = y.numpy()
    if splits is not None:
        chosen = check_splits(splits, len(y))
    else:
        chosen = k_folds(target, 5 if folds is None else folds, task, seed)
    rows = tuple((train, held) for train, held in chosen for _ in range(seeds))
    over = "folds" if seeds == 1 else f"(fold, seed) pairs, {seeds} seeds a fold"
    return Replicates(tuple(range(len(rows))), rows, over)


def entry_unit(
    source: NetworkSource,
    run: EntryRun,
    replicate: int,
    train_data: tuple[Inputs, torch.Tensor],
    test_data: tuple[Inputs, torch.Tensor],
    ood: torch.Tensor | None,
    task: Task,
    level: float,
    shifts: ShiftedTests | None = None,
) -> tuple[list[SplitResult], dict[int, dict[str, Any]]]:
    """One (entry, replicate): train, predict, score (a sweeps unit: module level, picklable);
    with ``shifts``, every shifted copy of the test inputs scored too (``comparison.shifts``)."""
    trained = train_entry(
        source,
        run,
        replicate,
        train_data,
        test_data[0],
        ood,
        task is Task.REGRESSION,
        None if shifts is None else shifts.copies,
    )
    metrics = score(trained, test_data[1], task, level)
    for shift, samples in trained.shifted.items():
        copy = Trained(test=samples, ood=None, noise_std=trained.noise_std, seconds=0.0)
        scores = score(copy, test_data[1], task, level)
        metrics |= {shift_key(shift, name): value for name, value in scores.items()}
    result = SplitResult(
        split=replicate,
        test_log_likelihood=metrics["test_log_likelihood"],
        test_rmse=metrics.get("rmse", math.nan),
        train_seconds=trained.seconds,
    )
    return [result], {replicate: {**metrics, "tuning_seconds": 0.0}}


def entry_run(config: NetworkConfig, name: str, heteroscedastic: bool = False) -> EntryRun:
    """The settings of entry ``name`` (a known method) under ``config``; ``heteroscedastic``: a
    regression network whose two outputs are a mean and a log std."""
    chosen = base_method(name)
    return EntryRun(
        method=name,
        epochs=config.epochs,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        samples=config.test_samples,
        ensemble_size=config.ensemble_size if chosen.ensemble else 1,
        seed=config.seed,
        patience=config.patience,
        validation_fraction=config.validation_fraction,
        standardize=config.standardize,
        device=config.device,
        ivon=config.ivon if chosen.optimizer == "ivon" else None,
        adapter=config.adapter if chosen.pretrained else None,
        heteroscedastic=heteroscedastic,
    )


@dataclass(frozen=True)
class Prepared:
    """A checked comparison on a network, ready to train: what ``compare`` needs from here."""

    task: Task
    reason: str
    name: str
    runs: dict[str, EntryRun]
    replicate_ids: tuple[int, ...]
    over: str
    build_units: UnitBuilder


# Parameters: ``compare``'s arguments for the network form, resolved here (one call site)
def prepare(
    network: nn.Module | Callable[[], nn.Module],
    data: Any,
    test: Any,
    ood: Any,
    families: Sequence[str] | None,
    seeds: int,
    folds: int | None,
    splits: Sequence[Split] | None,
    config: NetworkConfig,
    cpus: int | None,
    shifts: ShiftedTests | None = None,
) -> Prepared:
    """Every check before any training (the data, the network's output, the entries, the test
    images a shift needs), then the runs and the unit builder."""
    if not isinstance(network, nn.Module) and not callable(network):
        raise ValueError(
            f"network: expected an nn.Module or a function returning one, got "
            f"{type(network).__name__}"
        )
    source = NetworkSource(network)
    rule = batch_rule(network) if isinstance(network, nn.Module) else DEFAULT_RULE
    x, y = as_tensors(data, "data", rule)
    task = Task.REGRESSION if y.is_floating_point() else Task.CLASSIFICATION
    reason = f"y holds {'floating-point targets' if y.is_floating_point() else 'integer classes'}"
    test_pair = None if test is None else as_tensors(test, "test", rule)
    ood_x = None if ood is None else _inputs(ood, "ood")
    for part, values in (("test", None if test_pair is None else test_pair[0]), ("ood", ood_x)):
        if values is not None and _shapes(values) != _shapes(x):
            raise ValueError(
                f"{part}: its examples have shape {_shapes(values)}, the "
                f"training examples {_shapes(x)}"
            )
    if test_pair is not None and test_pair[1].is_floating_point() != y.is_floating_point():
        raise ValueError("test: y_test and y differ in kind (classes against real values)")
    if ood is not None and task is Task.REGRESSION:
        raise ValueError("ood: out-of-distribution scores need a classification task")
    initial = source.draw(derive_seed(config.seed, 0, "init"))  # replicate 0's
    # inputs (and real targets) in the network's floating dtype: float64 arrays meet float32
    # weights otherwise
    dtype = next(
        (p.dtype for p in initial.parameters() if p.is_floating_point()), torch.get_default_dtype()
    )
    x, y = network_inputs(x, initial, dtype), (y.to(dtype) if task is Task.REGRESSION else y)
    if test_pair is not None:
        test_pair = (network_inputs(test_pair[0], initial, dtype), test_pair[1].to(y.dtype))
    ood_x = None if ood_x is None else network_inputs(ood_x, initial, dtype)
    heteroscedastic = _check_output(initial, x, y, task)
    if shifts is not None:
        if heteroscedastic:
            raise ValueError("shift: a heteroscedastic regressor is not scored under shift yet")
        tested = ("data", x) if test_pair is None else ("test", test_pair[0])
        shifts.check(tested[1], tested[0])
    names = check_entries(
        tuple(families or DEFAULT_ENTRIES[task]),
        initial,
        take(x, slice(0, 2)),
        partial(entry_run, config),
    )
    laplace = [n for n in names if base_method(n).predictive is PredictiveKind.LAPLACE]
    if heteroscedastic and laplace:
        raise ValueError(
            f"families: {laplace[0]!r}: laplace-torch's regression Hessian is that of one "
            "Gaussian noise std; this network's two outputs are a mean and a log std"
        )
    scaled = [name for name in names if name.endswith(SUFFIX)]
    if scaled and task is Task.REGRESSION:
        raise ValueError(
            f"families: {scaled[0]!r}: temperature scaling calibrates a "
            "classifier's probabilities; this is a regression"
        )
    chosen = replicates(y, test_pair, seeds, folds, splits, task, config.seed)
    if task is Task.CLASSIFICATION:
        tested = None if test_pair is None else test_pair[1].numpy()
        warn_unseen_classes(y.numpy(), chosen.rows, tested)
    runs = {n: entry_run(config, n, heteroscedastic) for n in names}
    # IVON's and the adapter's settings key the runs of the entries they train (EntryRun.ivon,
    # .adapter), not the data: other values leave every other entry's stored runs in place
    shared = {k: v for k, v in asdict(config).items() if k not in ("ivon", "adapter")}
    # the shifts key the runs only when given: the runs of a comparison without them stay put
    keyed = {} if shifts is None else {"shifts": shifts.key}
    settings = repr({"network": network_key(initial), **shared, **keyed})
    arrays = [*_arrays(x), y.numpy()]
    if test_pair is not None:
        arrays += [*_arrays(test_pair[0]), test_pair[1].numpy()]
    if ood_x is not None:
        arrays += _arrays(ood_x)
    splits_key = [
        (train, held if held is not None else np.empty(0, np.int64)) for train, held in chosen.rows
    ]
    name = data_key(
        source.label,
        np.concatenate([a.ravel().astype(np.float64) for a in arrays]),
        np.asarray([a.size for a in arrays]),
        splits_key,
        settings,
    )

    def build_units(entry: Runs, missing: list[int]) -> list[Unit]:
        units = []
        for k in missing:
            train_rows, test_rows = chosen.rows[k]
            training = (take(x, train_rows), y[train_rows])
            testing = test_pair if test_rows is None else (take(x, test_rows), y[test_rows])
            units.append(
                Unit(
                    f"{entry.label} replicate {k}",
                    entry_unit,
                    (source, entry.config, k, training, testing, ood_x, task, config.level, shifts),
                    cpus,
                )
            )
        return units

    return Prepared(task, reason, name, runs, chosen.ids, chosen.over, build_units)
