"""Units of UCI training for the driver and the shared parts of the UCI reproductions
(``regression.sweep_command`` for ``vbnn sweep``; the lab's ``vbnn reproduce overpruning`` for
Table 1 and ``vbnn reproduce uci-depth``); their tuning studies run through
``regression.tuning_driver``.

- :class:`SplitUnits` is the unit builder of the driver (``sweeps.driver.train_missing``) that
  every UCI caller shares: :func:`split_units` cuts the splits a configuration still lacks into
  the stacks the engine would train together (``engine.stack_chunks``), so a unit is one chunk
  (a sweep trains and stores the stacks that ``engine.run_splits`` would, chunk by chunk), and
  :func:`train_unit` trains one chunk (``engine.run_splits``) with each split's tuned values,
  returning its ``SplitResult`` rows and, given ``stack_metrics``, further per-split metrics of
  the trained stack (e.g. pruned units per layer), stored with the rows.
- :func:`add_study_arguments` gives the two UCI reproductions their shared command-line options
  and :func:`uci_jobs` the configurations they cover;
  :func:`print_progress` is their ``--status`` (:func:`progress_table`): how far a resumable
  run has come, read from its database without training or writing anything.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from vbnn.core.contracts import SplitResult
from vbnn.data import load_uci
from vbnn.data.splits import group_by_size
from vbnn.data.uci import RegressionDataset
from vbnn.regression.engine import (
    Overrides,
    StackMetrics,
    TrainedStack,
    run_splits,
    stack_chunks,
)
from vbnn.regression.methods import add_runtime_arguments, method_config, method_fields
from vbnn.regression.runs import TrainConfig
from vbnn.regression.studies import used_budget
from vbnn.regression.tuning import TuningConfig, hidden_label, study_name
from vbnn.regression.tuning_driver import stored_trials
from vbnn.stores.results_db import ResultsDatabase, optuna_storage
from vbnn.sweeps.contracts import Unit
from vbnn.sweeps.driver import Runs

Job = tuple[RegressionDataset, TrainConfig, list[int]]  # a configuration and its splits
Shapes = Callable[[str], Iterable[tuple[str, tuple[int, ...]]]]  # data set -> (method, hidden)


def uci_jobs(
    args: argparse.Namespace,
    datasets: Sequence[str],
    splits: Sequence[int] | None,
    iterations: int | None,
    shapes: Shapes,
) -> list[Job]:
    """(data set, config, splits) of every data set and every (method, hidden widths) that
    ``shapes(name)`` lists for it, in that order; ``splits`` None means all of a set's splits.
    Seed, ``--compile`` and ``--device`` come from the command line ``args``."""
    jobs = []
    for name in datasets:
        dataset = load_uci(name, args.data_dir)
        chosen = list(splits or range(dataset.num_splits))
        for method, hidden in shapes(name):
            values = {"hidden": hidden, "seed": args.seed, "device": args.device}
            if iterations is not None:
                values["iterations"] = iterations
            if "compile" in method_fields(method):
                values["compile"] = args.compile
            config = method_config(method, **values)
            jobs.append((dataset, config, chosen))
    return jobs


def add_study_arguments(
    parser: argparse.ArgumentParser,
    out: str,
    quick_help: str,
    datasets: Sequence[str],
    methods: Sequence[str],
    splits_help: str,
) -> None:
    """The options of a UCI study shared by ``reproduce overpruning`` and ``uci-depth``."""
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--datasets", default=None, help=f"comma list (default: {datasets})")
    parser.add_argument("--methods", default=None, help=f"comma list (default: {methods})")
    parser.add_argument("--splits", default=None, help=splits_help)
    parser.add_argument("--iterations", type=int, default=None, help="override every run's")
    parser.add_argument("--trials", type=int, default=None, help="tuning candidates per study")
    parser.add_argument("--seed", type=int, default=0)
    add_runtime_arguments(parser)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--status",
        action="store_true",
        help="print how far the run in --out has come (candidates, split runs); trains nothing",
    )


def split_units(
    dataset: RegressionDataset, config: TrainConfig, splits: Sequence[int], size: int | None
) -> list[list[int]]:
    """``splits`` cut into units of ``size`` splits (None: the engine's chunks for ``config``)."""
    if size is None:
        return stack_chunks(dataset, config, splits)
    units = []
    for group in group_by_size(dataset, splits):
        units.extend(group[begin : begin + size] for begin in range(0, len(group), size))
    return units


def train_unit(
    dataset: RegressionDataset,
    splits: list[int],
    config: TrainConfig,
    per_split: Mapping[int, Mapping[str, float]] | None = None,
    stack_metrics: StackMetrics | None = None,
) -> tuple[list[SplitResult], dict[int, Mapping[str, Any]]]:
    """``config`` on ``splits`` through ``engine.run_splits`` (each split's own tuned values in
    ``per_split``); returns the results and ``stack_metrics`` of every trained stack (split ->
    values; empty without it)."""
    metrics: dict[int, Mapping[str, Any]] = {}

    def measure(stack: TrainedStack) -> None:
        if stack_metrics is not None:
            metrics.update(stack_metrics(stack))

    result = run_splits(dataset, splits, config, per_split=per_split, on_stack=measure)
    return list(result.splits), metrics


@dataclass(frozen=True)
class SplitUnits:
    """The driver's unit builder for the UCI engine: one :func:`train_unit` a chunk of the splits
    a configuration lacks (``sweeps.driver.UnitBuilder``).

    Attributes:
        datasets: the data sets by name (a configuration's ``Runs.dataset``).
        values: a configuration's per-split hyper-parameter values (split -> {name: value}),
            e.g. read from its ``Runs.extra``; None, or returning None: the config's own.
        stack_metrics: a configuration's further metrics of every trained stack, stored with
            its rows (``engine.StackMetrics``); None: none.
        splits_per_unit: splits a unit (None: the engine's chunks, ``engine.stack_chunks``).
        cpus: torch threads of a unit on every executor (None: one; ``contracts.Unit``).
    """

    datasets: Mapping[str, RegressionDataset]
    values: Callable[[Runs], Overrides | None] | None = None
    stack_metrics: Callable[[Runs], StackMetrics | None] | None = None
    splits_per_unit: int | None = None
    cpus: int | None = None

    def __call__(self, runs: Runs, missing: list[int]) -> list[Unit]:
        dataset = self.datasets[runs.dataset]
        values = None if self.values is None else self.values(runs)
        metrics = None if self.stack_metrics is None else self.stack_metrics(runs)
        units = []
        for chunk in split_units(dataset, runs.config, missing, self.splits_per_unit):
            per_split = None if values is None else {k: values[k] for k in chunk}
            arguments = (dataset, chunk, runs.config, per_split, metrics)
            key = f"{runs.name} splits {chunk[0]}-{chunk[-1]}"
            units.append(Unit(key, train_unit, arguments, self.cpus))
        return units


def progress_table(
    jobs: Sequence[Job],
    tuned_splits: Callable[[list[int]], list[int]],
    tuning: TuningConfig,
    storage: optuna.storages.BaseStorage,
    database: ResultsDatabase,
    provenance: Callable[[RegressionDataset, TrainConfig, list[int]], Mapping[str, Any]],
) -> pd.DataFrame:
    """How far a resumable run has come: one row per configuration, read from its database.

    Args:
        jobs: (data set, config, splits) of every configuration the run covers.
        tuned_splits: the splits whose studies the tuning protocol uses, given a job's splits.
        provenance: the ``extra`` a job's runs are stored with; called only once the job's
            studies are complete (its split runs start only then).

    Returns:
        Columns data set, method, hidden (widths), candidates (distinct candidates scored over
        the budget, ``studies.used_budget``) and split runs (stored over planned).
    """
    rows = []
    for dataset, config, splits in jobs:
        names = [study_name(dataset.name, k, config, tuning.seed) for k in tuned_splits(splits)]
        counts = [min(used_budget(stored_trials(storage, name)), tuning.trials) for name in names]
        runs = 0
        if all(count >= tuning.trials for count in counts):
            extra = provenance(dataset, config, splits)
            runs = len(database.stored_splits(dataset.name, config, extra) & set(splits))
        rows.append({
            "data set": dataset.name,
            "method": config.method,
            "hidden": hidden_label(config.hidden),
            "candidates": f"{sum(counts)}/{tuning.trials * len(names)}",
            "split runs": f"{runs}/{len(splits)}",
        })  # fmt: skip
    return pd.DataFrame(rows)


def print_progress(
    out: Path,
    jobs: Sequence[Job],
    tuned_splits: Callable[[list[int]], list[int]],
    tuning: TuningConfig,
    provenance: Callable[..., Mapping[str, Any]],
    heading: str = "",
) -> None:
    """Print :func:`progress_table` for the run in ``out`` (``provenance`` takes the Optuna
    storage first); a folder without a database says so."""
    database_path = out / "results.sqlite"
    if not database_path.is_file():
        print(f"{database_path}: no results database yet; nothing has run")
        return
    storage = optuna_storage(database_path)
    with ResultsDatabase(database_path) as database:
        stored_with = partial(provenance, storage)
        table = progress_table(jobs, tuned_splits, tuning, storage, database, stored_with)
    print(f"{database_path}{heading}")
    print(table.to_string(index=False))
