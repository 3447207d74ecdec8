"""The one driver of stored runs: what the database lacks -> units -> executor -> database -> rows.

A :class:`Runs` names one configuration's runs: the data set, the run config (its ``method`` and
``seed``), the replicates (splits, folds or seeds) and the ``extra`` stored with them, part of
their key in the results database (``stores.results_db``). :func:`train_missing` asks the
database which replicates each configuration lacks, has a :data:`UnitBuilder` cut them into
units, runs the units on an executor (``sweeps.executors``: local, processes, Ray), writes every
finished unit's rows in one transaction as it arrives (the driver alone writes) and reads every
requested replicate back (:class:`StoredRuns`). So a killed run loses at most the units in
flight, a second identical call trains nothing, and the rows read back do not depend on the
executor or on how often the run was resumed.

Every caller that stores runs goes through here: ``vbnn sweep`` (``regression.sweep_command``),
``vbnn.compare`` (``comparison.run``), the UCI reproductions of the lab and
``regression.engine.run_splits(database=...)``; ``regression.split_units.SplitUnits`` is the
builder of the UCI engine's chunks that the UCI callers share. Those that tune first complete
their Optuna studies through the tuning loop beside this one,
``regression.tuning_driver.tune_missing``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vbnn.core.contracts import SplitResult
from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.contracts import Executor, ExecutorSettings, Unit
from vbnn.sweeps.executors import drive, run_sweep


@dataclass(frozen=True)
class Runs:
    """One configuration's runs: each replicate is one row of the results database.

    Attributes:
        dataset: the data set's name (the first part of a row's key).
        config: the run config; its ``method`` and ``seed`` and its hash key the rows.
        replicates: the splits, folds or seeds to run (read back by ascending id).
        extra: stored with every row and part of its key (e.g. the tuning protocol and the
            values it chose); None for none.
        label: names the configuration's units (progress bar, failure summary, Ray task
            names); empty: ``"{dataset} {method} seed {seed}"``.
    """

    dataset: str
    config: Any
    replicates: tuple[int, ...]
    extra: Mapping[str, Any] | None = None
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicates", tuple(int(k) for k in self.replicates))

    @property
    def name(self) -> str:
        """``label``, else the data set, method and seed."""
        return self.label or f"{self.dataset} {self.config.method} seed {self.config.seed}"


@dataclass(frozen=True)
class StoredRuns:
    """A configuration's replicates as read back from the database, by replicate id.

    Attributes:
        runs: the configuration.
        results: one ``SplitResult`` per stored replicate, ascending replicate id.
        metrics: replicate id -> every metric stored with it (the test log-likelihood and RMSE,
            and those the units returned).
    """

    runs: Runs
    results: tuple[SplitResult, ...]
    metrics: Mapping[int, Mapping[str, Any]]


# (a configuration, the replicates it lacks in database order) -> the units that train them.
# A unit returns ``(results, metrics)``: a list of ``SplitResult`` (one per replicate it trained,
# ``split`` the replicate id) and {replicate: {metric: value}} of further metrics to store
# (may be empty).
UnitBuilder = Callable[[Runs, list[int]], Sequence[Unit]]


@dataclass(frozen=True)
class Pending:
    """What :func:`train_missing` is about to train: the units and the replicates they cover.

    Attributes:
        units: every unit, configuration by configuration in the order given.
        owners: for each unit, the index of its configuration.
        missing: replicates to train, all configurations together.
        total: replicates requested, all configurations together.
    """

    units: tuple[Unit, ...]
    owners: tuple[int, ...]
    missing: int
    total: int


def pending_units(
    database: ResultsDatabase, runs: Sequence[Runs], build_units: UnitBuilder
) -> Pending:
    """The units of the replicates ``database`` lacks (none for a complete configuration)."""
    units: list[Unit] = []
    owners: list[int] = []
    missing_count = 0
    for index, entry in enumerate(runs):
        missing = database.missing_splits(entry.dataset, entry.replicates, entry.config,
                                          entry.extra)  # fmt: skip
        missing_count += len(missing)
        built = list(build_units(entry, missing)) if missing else []
        units.extend(built)
        owners.extend([index] * len(built))
    total = sum(len(entry.replicates) for entry in runs)
    return Pending(tuple(units), tuple(owners), missing_count, total)


# Parameters: what to run, then where and how it shows, then two optional hooks
def train_missing(
    database: ResultsDatabase,
    runs: Sequence[Runs],
    build_units: UnitBuilder,
    executor: ExecutorSettings | Executor | None = None,
    *,
    description: str = "training",
    progress: bool = False,
    before_training: Callable[[Pending], None] | None = None,
    on_stored: Callable[[Unit, Any], None] | None = None,
) -> list[StoredRuns]:
    """Train the replicates ``database`` lacks, store each unit as it finishes, read all back.

    Args:
        database: the open results database; only this function writes it meanwhile.
        runs: the configurations, read back in this order.
        build_units: cuts a configuration's missing replicates into units.
        executor: settings of a fresh executor (closed afterwards; None: the local one), or an
            executor to use as it is (left open: e.g. ``LocalExecutor(raise_errors=True)``).
        description: the progress bar's label.
        progress: show the progress bar of units.
        before_training: called with the :class:`Pending` before any unit runs.
        on_stored: called with each unit and its value after its rows are committed.

    Returns:
        One :class:`StoredRuns` per configuration of ``runs``, with every requested replicate
        stored (those stored before the call and those trained now).

    Raises:
        SweepError: some units failed (``sweeps.executors.drive``); the others are stored.
        ValueError: a unit returned a result for a replicate its configuration did not ask for.
    """
    pending = pending_units(database, runs, build_units)
    # every executor hands back the Unit objects it was given: their ids name their owners
    owner = {id(unit): index for unit, index in zip(pending.units, pending.owners, strict=True)}
    if before_training is not None:
        before_training(pending)

    def store(unit: Unit, value: tuple[Sequence[SplitResult], Mapping[int, Any]]) -> None:
        entry = runs[owner[id(unit)]]
        results, metrics = value
        unknown = sorted({r.split for r in results} - set(entry.replicates))
        if unknown:
            raise ValueError(f"unit {unit.key!r} returned replicates {unknown} that "
                             f"{entry.name} did not ask for")  # fmt: skip
        database.write_results(entry.dataset, entry.config, results, entry.extra, metrics)
        if on_stored is not None:
            on_stored(unit, value)

    if pending.units:
        if executor is None or isinstance(executor, ExecutorSettings):
            run_sweep(executor or ExecutorSettings(), pending.units, store, description, progress)
        else:
            drive(executor, pending.units, store, description, progress)
    return [read_back(database, entry) for entry in runs]


def read_back(database: ResultsDatabase, runs: Runs) -> StoredRuns:
    """What ``database`` holds of ``runs``' replicates (ascending replicate id)."""
    key = (runs.dataset, runs.config, runs.replicates, runs.extra)
    return StoredRuns(runs, tuple(database.read_results(*key)), database.read_metrics(*key))
