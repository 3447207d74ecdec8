"""``vbnn.compare``: which family for my network and data? Entries over the same replicates.

Two ways of building the network, one driver. ``compare(network, (x, y), test=..., ...)`` trains
the user's own ``nn.Module`` (``compare.network``: every ``vbnn.FAMILIES`` name through
``vbnn.convert``, and the baselines ``point``, ``ensemble``, ``mc-dropout``); ``compare(table,
target=...)`` (a CSV file, a UCI name or arrays) builds MLPs and trains each family's folds as
batched stacks (``compare.regression``, ``compare.classification``; the regression baselines
``es``, ``map``, ``sgld`` and the per-fold search run there). Every check runs before any
training. Both store each (entry, replicate) in a results database (``stores.results_db``) under
a name that hashes the data, the replicates and the settings (and the network), so a comparison
killed part way resumes and an identical second call trains nothing; both run their units on the
executor of the sweeps (``local``, ``processes``, ``ray``) through the driver of every stored
run (``sweeps.driver``: the driver alone writes) and share the report: mean +- SEM, paired
gaps, the verdict and the figure (``compare.report``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from torch import nn

from vbnn.comparison import folds as folding
from vbnn.comparison.classification import classification_stack, classifier_run
from vbnn.comparison.config import (
    DEFAULT_FAMILIES,
    CompareConfig,
    NetworkConfig,
    check_families,
    runs_on_stacks,
)
from vbnn.comparison.data import load_data
from vbnn.comparison.folds import Split, Task
from vbnn.comparison.network import prepare
from vbnn.comparison.regression import (
    COVERAGE,
    interval_coverages,
    provenance,
    search_seconds,
    train_config,
)
from vbnn.comparison.report import (
    METRICS,
    OUT_OF_DISTRIBUTION,
    display_table,
    paired_gaps,
    plot_comparison,
    summary_frame,
    verdict,
)
from vbnn.comparison.shifts import ShiftedTests, resolve_shifts, shift_frame
from vbnn.comparison.table_network import network_run, network_units
from vbnn.core.devices import usable_device
from vbnn.data.shift import Normalisation
from vbnn.data.uci import RegressionDataset
from vbnn.regression.split_units import SplitUnits
from vbnn.regression.tuning import TuningConfig, study_name
from vbnn.regression.tuning_driver import tune_missing
from vbnn.stores.markdown import markdown_table
from vbnn.stores.results_db import ResultsDatabase, optuna_storage
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.driver import Runs, UnitBuilder, train_missing


@dataclass(frozen=True)
class ComparisonResult:
    """What :func:`compare` found.

    Attributes:
        task: regression or classification; ``task_reason`` says why ("given" or the inference).
        name: the name the runs are stored under (label and a hash of the data and folds).
        folds: one row per (family, fold): test ``log_likelihood`` (nats per row), ``rmse`` and
            ``coverage`` (regression) or ``accuracy``, ``ece``, ``brier`` (classification),
            ``seconds`` (training) and ``tuning_seconds`` (the fold's search).
        summary: per family, mean and standard error over folds of every metric.
        gaps: per family, the paired test-LL gap to the best family and its SEM, and ``tie``.
        table: the printed table (strings "mean +- sem").
        verdict: the plain sentence of ``report.verdict``.
        level: the probability of the interval whose coverage is reported.
        over: what the replicates are ("folds"; "seeds" for a network with a test set).
        shifts: with ``shift=``, one row per (entry, replicate, shift): ``entry``,
            ``replicate``, ``shift`` (the kind), ``intensity`` and the metrics of the shifted
            copy of the test set (``comparison.shifts``); None without.
    """

    task: Task
    task_reason: str
    name: str
    folds: pd.DataFrame
    summary: pd.DataFrame
    gaps: pd.DataFrame
    table: pd.DataFrame
    verdict: str
    level: float
    over: str = "folds"
    shifts: pd.DataFrame | None = None

    def plot(self, path: str | Path | None = None):
        """Test LL per fold and mean +- SEM per family; written to ``path`` when given."""
        return plot_comparison(self.folds, self.summary, path)

    def plot_shift(self, path: str | Path | None = None, metrics: Sequence[str] | None = None):
        """Ovadia et al. 2019's figure of ``shifts`` (``vbnn.plots.plot_shift``): each metric
        (default accuracy, test LL, ECE, Brier) against intensity, a line per entry, a column
        per shift kind; written to ``path`` when given.

        Raises:
            ValueError: the comparison ran without ``shift=``.
        """
        if self.shifts is None:
            raise ValueError(
                "plot_shift: this comparison ran without shift=; pass shift='ovadia' or a list "
                "of vbnn.data.shift.Shift to compare"
            )
        from vbnn.plots import plot_shift

        return plot_shift(self.shifts, metrics, path)

    def to_markdown(self) -> str:
        """The table and the verdict as Markdown."""
        folds = int(self.summary["folds"].max())
        return (
            f"{self.task.value} on {self.name}, mean +- standard error over {folds} "
            f"{self.over}\n\n"
            f"{markdown_table(self.table, index=True)}\n\n{self.verdict}\n"
        )


def executor_settings(executor: str | ExecutorSettings) -> ExecutorSettings:
    if isinstance(executor, ExecutorSettings):
        return executor
    kinds = [k.value for k in ExecutorKind]
    if executor not in kinds:
        raise ValueError(f"executor={executor!r}: choose from {kinds}")
    return ExecutorSettings(kind=ExecutorKind(executor))


# Parameters: the public entry point: the network or data, then keyword-only options that the
# CLI's flags mirror; ``settings`` are ``CompareConfig``'s (table) or ``NetworkConfig``'s fields
def compare(
    data: Any,
    y: Any = None,
    *,
    test: Any = None,
    ood: Any = None,
    seeds: int = 1,
    target: str | None = None,
    families: Sequence[str] | None = None,
    folds: int | None = None,
    splits: Sequence[Split] | None = None,
    task: str | Task | None = None,
    database: str | Path | None = None,
    executor: str | ExecutorSettings = "local",
    progress: bool = False,
    data_dir: str | None = None,
    shift: Any = None,
    normalisation: Normalisation | None = None,
    **settings: Any,
) -> ComparisonResult:
    """Compare families (and baselines) on the same replicates of one data set.

    (Long only in this docstring, which documents every argument of the public entry point; the
    body is the dispatch to ``_compare_network`` and ``_compare_table``.)

    Your network: ``compare(network, (x, y), test=(x_test, y_test), ood=x_ood, families=[...],
    seeds=S, epochs=E)``; a table: ``compare("data.csv", target="price")``, ``compare("yacht")``
    or ``compare(X, y)``, which builds MLPs.

    Args:
        data: an ``nn.Module`` or a function of no arguments returning one (your network); or a
            CSV file (with ``target``), a UCI set's name ("yacht"), or inputs X (N, I).
        y: with a network, its data: (x, y) tensors or arrays, a Dataset of (x, y) pairs, or
            a mapping of tensors holding the target (a HuggingFace model's batch: the network's
            ``vbnn.BatchRule``) (integer y: classification, floating y: regression); with X,
            the targets (N,).
        test: a network's test data, in the form of ``y``'s; each seed trains on all of ``y``.
        ood: a network's out-of-distribution inputs (classification): AUROC, AUPR and FPR95 of
            the predictive entropy and of the mutual information.
        seeds: a network's seeds per test set or fold (replicates of training).
        target: the target column of a CSV file.
        families: names of ``vbnn.FAMILIES``; with a network also ``ivon``,
            ``ivon-ensemble``, ``point``, ``ensemble``, ``mc-dropout``, ``laplace`` and the
            adapter entries ``lora``, ``lora-ensemble``, ``mf-lora``, ``ivon-lora``,
            ``laplace-lora`` (``comparison.entries``, ``methods.lora``); with a table the
            regression baselines ``es``, ``map``, ``sgld`` (default:
            ``config.DEFAULT_FAMILIES`` of the task; a network ``network.DEFAULT_ENTRIES``).
        folds: K, when neither ``test`` nor ``splits`` is given: seeded K folds (stratified for
            classification; default 5).
        splits: (training rows, test rows) pairs to use instead of K folds.
        task: a table's "regression" or "classification"; None infers it from the target
            (``folds.infer_task``) and says why in ``task_reason``. A network's task follows
            the dtype of y.
        database: the results SQLite file (resumable); None keeps the runs in a temporary file.
        executor: "local", "processes", "ray" or an ``ExecutorSettings``.
        progress: progress bars on stderr.
        data_dir: the data directory for a UCI name (default ``$VBNN_DATA_DIR``).
        shift: a network's shifted test sets (``comparison.shifts``): "ovadia" (rotations by 0
            to 180 degrees in steps of 15 and six corruptions at intensities 0 to 5,
            ``vbnn.data.shift.ovadia_shifts()``) or a list of ``vbnn.data.shift.Shift``; the
            test inputs must be images (N, C, H, W) of pixels in [0, 1]. The result's
            ``shifts`` frame holds the metrics of every copy, ``plot_shift`` draws them. None:
            no shift.
        normalisation: how the test images were normalised (a
            ``vbnn.data.shift.Normalisation``): the shifts are made on the pixels and
            normalised again. None: they are pixels.
        **settings: a table's ``CompareConfig`` fields (``tune``, ``trials``, ``seed``,
            ``iterations``, ``epochs``, ``hidden``, ...); a network's ``NetworkConfig`` fields
            (``epochs``, ``batch_size``, ``learning_rate``, ``test_samples``,
            ``ensemble_size``, ``patience``, ``validation_fraction``, ``standardize``,
            ``device``, ``level``, ``seed``, ``ivon``: a ``vbnn.IVON`` for the ``ivon``
            entries, ``adapter``: a ``vbnn.LoRA`` for the adapter entries).

    Raises:
        ValueError: bad data (the table's errors name file, line and column; a network's data
            name the argument and shape), an unknown or unsuitable family, too few rows for K
            folds, a one-class target, a bad setting, a ``device`` this machine cannot use
            ("cuda" without CUDA; not checked on Ray, whose workers may hold the GPUs); all
            before any training.

    Warns:
        UnseenClassWarning: a network's test labels (of ``test``, or of a fold's test rows)
            hold classes that its training labels lack.
    """
    request = Request(families, folds, splits, database, executor, progress)
    if isinstance(data, nn.Module) or callable(data):
        for given, name in ((target, "target"), (task, "task"), (data_dir, "data_dir")):
            if given is not None:
                raise ValueError(f"{name}: applies to a table, not to a network")
        tests = _shifted_tests(shift, normalisation, settings.get("seed", NetworkConfig.seed))
        return _compare_network(data, y, test, ood, seeds, request, settings, tests)
    if shift is not None or normalisation is not None:
        raise ValueError(
            "shift and normalisation apply to a network's test images: "
            "compare(network, (x, y), test=..., shift='ovadia')"
        )
    if test is not None or ood is not None or seeds != 1:
        raise ValueError("test, ood and seeds apply to a network: compare(network, (x, y), ...)")
    return _compare_table(data, y, target, task, data_dir, request, settings)


@dataclass(frozen=True)
class Request:
    """What every comparison takes beside its data and settings (``compare``'s arguments): the
    entries, the folds or splits, where the runs are stored and how their units run."""

    families: Sequence[str] | None
    folds: int | None
    splits: Sequence[Split] | None
    database: str | Path | None
    executor: str | ExecutorSettings
    progress: bool


def _shifted_tests(
    shift: Any, normalisation: Normalisation | None, seed: int
) -> ShiftedTests | None:
    """The shifted copies a network's entries are scored on (None: no ``shift``)."""
    shifts = resolve_shifts(shift)
    if normalisation is not None and not isinstance(normalisation, Normalisation):
        raise ValueError(
            f"normalisation: expected a vbnn.data.shift.Normalisation, got "
            f"{type(normalisation).__name__}"
        )
    if normalisation is not None and shifts is None:
        raise ValueError("normalisation: applies with shift=, which is None")
    return None if shifts is None else ShiftedTests(shifts, seed, normalisation)


def _table_task(table: Any, task: str | Task | None) -> tuple[Task, str]:
    """A table's task, as given or inferred from its target, and why (``folds.infer_task``)."""
    if task is None and table.named_classes:
        task, reason = Task.CLASSIFICATION, "inferred: y holds class names"
    elif task is None:
        task, reason = folding.infer_task(table.target)
        reason = f"inferred: {reason}"
    else:
        if str(getattr(task, "value", task)) not in [t.value for t in Task]:
            raise ValueError(f"task={task!r}: choose 'regression' or 'classification'")
        task, reason = Task(task), "given"
        if task is Task.REGRESSION and table.named_classes:
            raise ValueError("task='regression': y holds class names, not numbers")
    if table.classes:
        reason += f"; classes coded in sorted order: {table.class_order()}"
    return task, reason


# Parameters: ``compare``'s arguments for a table (one call site)
def _compare_table(
    data: Any,
    y: Any,
    target: str | None,
    task: str | Task | None,
    data_dir: str | None,
    request: Request,
    settings: dict[str, Any],
) -> ComparisonResult:
    """``compare`` on a table: the engine's methods on batched stacks of folds, the others an
    MLP a fold (``comparison.table_network``), one frame of rows."""
    known = set(CompareConfig.__dataclass_fields__)
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"compare: unknown setting {unknown[0]!r}; settings are {sorted(known)}")
    config = CompareConfig(**settings)
    table = load_data(data, y, target, data_dir)
    x, values = table.inputs, table.target
    task, reason = _table_task(table, task)
    names = check_families(tuple(request.families or DEFAULT_FAMILIES[task]), task)
    folds = 5 if request.folds is None else request.folds
    if task is Task.CLASSIFICATION:
        folding.check_labels(values, folds if request.splits is None else None)
    if request.splits is None:
        chosen = folding.k_folds(values, folds, task, config.seed)
    else:
        chosen = folding.check_splits(request.splits, len(values))
    if task is Task.CLASSIFICATION:
        folding.check_classes_in_training(values, chosen)
    # every setting but the number of candidates trained side by side (stacked == alone)
    key = repr({k: v for k, v in asdict(config).items() if k != "batch"})
    name = folding.data_key(table.label, x, values, chosen, key)
    folds_of = TableFolds(name, table, task, chosen, config)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(request.database or Path(scratch) / "compare.sqlite")
        frame = _table_frame(
            folds_of, names, path, executor_settings(request.executor), request.progress
        )
    return _result(frame, task, reason, name, config.level, "folds")


@dataclass(frozen=True)
class TableFolds:
    """A checked table comparison's data: its stored name, the table, the task, the folds and
    the settings."""

    name: str
    table: Any
    task: Task
    splits: tuple[Split, ...]
    config: CompareConfig


def _table_frame(
    folds: TableFolds,
    names: tuple[str, ...],
    path: Path,
    settings: ExecutorSettings,
    progress: bool,
) -> pd.DataFrame:
    """One row per (entry, fold): the stacks' entries, then the MLPs', in the order given."""
    x, values, task, config = folds.table.inputs, folds.table.target, folds.task, folds.config
    stacked = tuple(n for n in names if runs_on_stacks(n, task))
    networks = tuple(n for n in names if not runs_on_stacks(n, task))
    frames = []
    if stacked and task is Task.REGRESSION:
        dataset = RegressionDataset(folds.name, x, values, folds.splits, folds.table.label)
        frames.append(
            _regression_folds(
                dataset, stacked, config, path, settings, progress, folds.table.preset
            )
        )
    elif stacked:
        frames.append(
            _classification_folds(
                folds.name, x, values, folds.splits, stacked, config, path, settings, progress
            )
        )
    if networks:
        frames.append(
            _network_folds(
                folds.name,
                x,
                values,
                folds.splits,
                networks,
                task,
                config,
                path,
                settings,
                progress,
            )
        )
    frame = pd.concat(frames, ignore_index=True)
    order = {n: i for i, n in enumerate(names)}
    frame = frame.sort_values("family", key=lambda c: c.map(order), kind="stable")
    return frame.reset_index(drop=True)


def _result(
    frame: pd.DataFrame,
    task: Task,
    reason: str,
    name: str,
    level: float,
    over: str,
    shifts: pd.DataFrame | None = None,
) -> ComparisonResult:
    """The report of the rows of every (entry, replicate): summary, gaps, table, verdict."""
    summary = summary_frame(frame, task)
    gaps = paired_gaps(frame).loc[summary.index]  # both put the best family first
    return ComparisonResult(
        task=task,
        task_reason=reason,
        name=name,
        folds=frame,
        summary=summary,
        gaps=gaps,
        table=display_table(summary, gaps, task, level),
        verdict=verdict(gaps),
        level=level,
        over=over,
        shifts=shifts,
    )


# Parameters: where the runs are stored and what they are, then the executor (two call sites)
def _replicate_rows(
    path: Path,
    dataset: str,
    runs: Mapping[str, Any],
    replicates: tuple[int, ...],
    build_units: UnitBuilder,
    settings: ExecutorSettings,
    progress: bool,
) -> list[dict[str, Any]]:
    """Train what the database at ``path`` lacks (``sweeps.driver``), then one row per (entry,
    replicate): ``{"family": name, "fold": replicate, "seconds": training seconds, **metrics}``
    with the metrics the units stored, entries in the order of ``runs``."""
    entries = [Runs(dataset, run, replicates, label=name) for name, run in runs.items()]
    with ResultsDatabase(path) as database:
        stored = train_missing(database, entries, build_units, settings, progress=progress)
    return [
        {
            "family": entry.runs.label,
            "fold": r.split,
            "seconds": r.train_seconds,
            **entry.metrics[r.split],
        }
        for entry in stored
        for r in entry.results
    ]


# Parameters: ``compare``'s arguments for a network (one call site)
def _compare_network(
    network: Any,
    data: Any,
    test: Any,
    ood: Any,
    seeds: int,
    request: Request,
    settings: dict[str, Any],
    shifts: ShiftedTests | None = None,
) -> ComparisonResult:
    """``compare`` on the user's network (``compare.network``), through the shared driver."""
    known = set(NetworkConfig.__dataclass_fields__)
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(
            f"compare: unknown setting {unknown[0]!r} for a network; settings are {sorted(known)}"
        )
    config = NetworkConfig(**settings)
    run_settings = executor_settings(request.executor)
    if config.device is not None and run_settings.kind is not ExecutorKind.RAY:
        usable_device(config.device)  # on Ray the workers' GPUs count, not the driver's
    prepared = prepare(
        network,
        data,
        test,
        ood,
        request.families,
        seeds,
        request.folds,
        request.splits,
        config,
        run_settings.cpus_per_unit,
        shifts,
    )
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(request.database or Path(scratch) / "compare.sqlite")
        rows = _replicate_rows(
            path,
            prepared.name,
            prepared.runs,
            prepared.replicate_ids,
            prepared.build_units,
            run_settings,
            request.progress,
        )
    frame = pd.DataFrame(rows).rename(columns={"test_log_likelihood": "log_likelihood"})
    columns = ["family", "fold", *METRICS[prepared.task], "seconds", "tuning_seconds"]
    columns += [c for c in OUT_OF_DISTRIBUTION if c in frame.columns]
    # a stored run made before a metric existed reads back without it: NaN
    frame = frame.reindex(columns=columns)
    shifted = None if shifts is None else shift_frame(rows, shifts.shifts)
    return _result(
        frame, prepared.task, prepared.reason, prepared.name, config.level, prepared.over, shifted
    )


# Parameters: the pieces ``compare`` has resolved and checked for a regression (one call site)
def _regression_folds(
    dataset: RegressionDataset,
    names: tuple[str, ...],
    config: CompareConfig,
    path: Path,
    settings: ExecutorSettings,
    progress: bool,
    preset_name: str,
) -> pd.DataFrame:
    """Tune (every fold's study), then train the folds each family lacks; one row per
    (family, fold) read back from the database."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna_storage(path)
    fold_ids = list(range(dataset.num_splits))
    configs = {name: train_config(name, config, preset_name) for name in names}
    tuning = TuningConfig(
        trials=config.trials,
        batch=min(config.batch, config.trials),
        validation_fraction=config.validation_fraction,
        seed=config.seed,
    )
    values: dict[str, dict[int, dict[str, float]]] = {name: {} for name in configs}
    if config.tune:  # every fold's study, then each fold's values
        studies = [(dataset, k, train) for train in configs.values() for k in fold_ids]
        chosen = iter(tune_missing(storage, studies, tuning, settings, progress=progress))
        values = {name: {k: next(chosen) for k in fold_ids} for name in configs}
    runs = [
        Runs(dataset.name, train, tuple(fold_ids), provenance(config, values[name]), name)
        for name, train in configs.items()
    ]
    coverage = partial(interval_coverages, level=config.level)
    build = SplitUnits(
        {dataset.name: dataset},
        values=(lambda entry: values[entry.label]) if config.tune else None,
        stack_metrics=lambda entry: coverage,
        cpus=settings.cpus_per_unit,
    )
    with ResultsDatabase(path) as database:
        stored = train_missing(database, runs, build, settings, progress=progress)
    rows = []
    for entry in stored:
        rows.extend(
            {
                "family": entry.runs.label,
                "fold": r.split,
                "log_likelihood": r.test_log_likelihood,
                "rmse": r.test_rmse,
                "coverage": entry.metrics[r.split].get(COVERAGE),
                "seconds": r.train_seconds,
                "tuning_seconds": search_seconds(
                    storage, study_name(dataset.name, r.split, entry.runs.config, tuning.seed)
                )
                if config.tune
                else 0.0,
            }
            for r in entry.results
        )
    return pd.DataFrame(rows).astype({"coverage": float})


# Parameters: the pieces ``compare`` has resolved and checked for a classification (one call site)
def _classification_folds(
    name: str,
    x: np.ndarray,
    values: np.ndarray,
    splits: tuple[Split, ...],
    names: tuple[str, ...],
    config: CompareConfig,
    path: Path,
    settings: ExecutorSettings,
    progress: bool,
) -> pd.DataFrame:
    """One unit per stack of folds the database lacks (folds of equal sizes; one fold a unit
    when tuned, the folds' learning rates differing); one row per (family, fold)."""
    _, labels = np.unique(values, return_inverse=True)
    runs = {family: classifier_run(family, config) for family in names}

    def build_units(entry: Runs, missing: list[int]) -> list[Unit]:
        groups: dict[tuple[int, ...], list[int]] = {}
        for k in missing:
            key = (k,) if entry.config.trials else tuple(len(part) for part in splits[k])
            groups.setdefault(key, []).append(k)
        return [
            Unit(
                f"{entry.label} folds {group}",
                classification_stack,
                (x, labels, [splits[k] for k in group], entry.config, group),
                settings.cpus_per_unit,
            )
            for group in groups.values()
        ]

    rows = _replicate_rows(
        path, name, runs, tuple(range(len(splits))), build_units, settings, progress
    )
    frame = pd.DataFrame(rows).rename(columns={"test_log_likelihood": "log_likelihood"})
    columns = ["family", "fold", *METRICS[Task.CLASSIFICATION], "seconds", "tuning_seconds"]
    return frame.reindex(columns=columns)


# Parameters: the pieces ``compare`` has resolved and checked for a table (one call site)
def _network_folds(
    name: str,
    x: np.ndarray,
    values: np.ndarray,
    splits: tuple[Split, ...],
    names: tuple[str, ...],
    task: Task,
    config: CompareConfig,
    path: Path,
    settings: ExecutorSettings,
    progress: bool,
) -> pd.DataFrame:
    """The methods that train an MLP a fold (``comparison.table_network``); one row per
    (entry, fold), with the columns of the stacks' rows."""
    target = values if task is Task.REGRESSION else np.unique(values, return_inverse=True)[1]
    runs = {entry: network_run(entry, config, task) for entry in names}
    build = network_units(x, target, splits, task, config, settings.cpus_per_unit)
    rows = _replicate_rows(path, name, runs, tuple(range(len(splits))), build, settings, progress)
    frame = pd.DataFrame(rows).rename(columns={"test_log_likelihood": "log_likelihood"})
    return frame.reindex(columns=["family", "fold", *METRICS[task], "seconds", "tuning_seconds"])
