"""``vbnn sweep GRID.toml``: every run of a grid (``regression.grid``) on an executor, stored in
``OUT/results.sqlite`` by the driver alone.

The units: for each (data set, config), the splits the database still lacks, cut into groups of
``splits_per_unit`` (default: the engine's chunks), each trained as one stack (the driver of
every stored run, ``sweeps.driver``, with the UCI builder
``regression.split_units.SplitUnits``). With
``[search]``, first ``workers`` search units per (data set, config) whose study is short of
``trials`` (``regression.tuning.tune`` on a shared Optuna study), then the evaluation units with
the best values. A killed sweep re-run with the same command trains only what is missing; a
local and a Ray sweep of one grid store the same rows. The workers of a search share its study,
so none of them may take a running trial for a dead one; the driver, alone with the studies before
it starts them, requeues the candidates a killed sweep left running (``regression.studies``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import optuna

from vbnn.data.uci import RegressionDataset, load_uci
from vbnn.regression.grid import Grid, Search, load_grid
from vbnn.regression.runs import TrainConfig
from vbnn.regression.split_units import SplitUnits
from vbnn.regression.studies import RUNNING, requeue_unfinished, used_budget
from vbnn.regression.tuning import TuningConfig, tune
from vbnn.regression.tuning_driver import stored_trials
from vbnn.stores.results_db import ResultsDatabase, config_hash
from vbnn.sweeps.contracts import Unit
from vbnn.sweeps.driver import Pending, Runs, train_missing
from vbnn.sweeps.executors import run_sweep, settings_from


def storage_for(search: Search, out: Path) -> str | optuna.storages.BaseStorage:
    """The study's storage: an RDB URL as given, else a journal file under ``out``."""
    if "://" in search.storage:
        return search.storage
    path = (out / search.storage).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def search_study_name(dataset: str, config: TrainConfig, search: Search) -> str:
    """One study per (data set, configuration, seed): the config hash tells combinations apart."""
    return f"{dataset}/split{search.split}/{config_hash(config)}/seed{config.seed}"


def search_unit(
    dataset: RegressionDataset, config: TrainConfig, search: Search, out: Path, worker: int
) -> dict[str, float]:
    """A worker's share of one study (all workers stop when it holds ``trials`` trials)."""
    name = search_study_name(dataset.name, config, search)
    storage = storage_for(search, out)
    tuning = _tuning(search, config)
    # workers share the study: another's running trial is live, not a killed one's
    shared = search.workers > 1
    return tune(dataset, search.split, config, tuning, storage, worker, name, not shared)


def _tuning(search: Search, config: TrainConfig) -> TuningConfig:
    return TuningConfig(
        trials=search.trials,
        batch=search.batch,
        validation_fraction=search.validation_fraction,
        seed=config.seed,
    )


def _searched_values(
    grid: Grid, datasets: dict[str, RegressionDataset], args: argparse.Namespace
) -> dict[tuple[str, TrainConfig], dict[str, float]]:
    """Run the search units that are needed; the best values of every (data set, config)."""
    search = grid.search
    assert search is not None
    storage = storage_for(search, args.out)

    def short_of_trials(name: str, config: TrainConfig) -> bool:
        study_name = search_study_name(name, config, search)
        trials = stored_trials(storage, study_name)
        if any(t.state == RUNNING for t in trials):  # no worker runs yet: a killed sweep's
            study = optuna.load_study(study_name=study_name, storage=storage)
            requeue_unfinished(study, search.trials)
        return used_budget(trials) < search.trials

    short = [(name, config) for name, config in grid.runs() if short_of_trials(name, config)]
    units = [
        Unit(
            f"search {name} {config.method} seed {config.seed} worker {w}",
            search_unit,
            (datasets[name], config, search, args.out.resolve(), w),
            args.cpus_per_unit,
        )
        for name, config in short
        for w in range(search.workers)
    ]
    settings = settings_from(args, {config.device for _, config in grid.runs()})
    run_sweep(settings, units, lambda unit, value: None, "search", not args.no_progress)
    # every study is complete now: tune() reads its best values without training
    return {
        (name, config): tune(
            datasets[name],
            search.split,
            config,
            _tuning(search, config),
            storage,
            name=search_study_name(name, config, search),
        )
        for name, config in grid.runs()
    }


def run(args: argparse.Namespace) -> None:
    grid = load_grid(args.grid)
    args.out.mkdir(parents=True, exist_ok=True)
    datasets = {name: load_uci(name, args.data_dir) for name in grid.datasets}
    values = _searched_values(grid, datasets, args) if grid.search else {}
    runs = []
    for name, config in grid.runs():
        found = values.get((name, config))
        extra = None
        if found is not None:
            extra = {"search": "optuna", "values": found, "trials": grid.search.trials}
        runs.append(Runs(name, config, tuple(grid.splits or range(datasets[name].num_splits)),
                         extra))  # fmt: skip
    build = SplitUnits(datasets, values=_searched_per_split, splits_per_unit=grid.splits_per_unit,
                       cpus=args.cpus_per_unit)  # fmt: skip

    def announce(pending: Pending) -> None:
        print(
            f"{args.grid}: {len(runs)} configurations, {pending.total} runs, "
            f"{pending.missing} to train in {len(pending.units)} units",
            file=sys.stderr,
        )

    settings = settings_from(args, {config.device for _, config in grid.runs()})
    with ResultsDatabase(args.out / "results.sqlite") as database:
        train_missing(database, runs, build, settings, description="sweep",
                      progress=not args.no_progress, before_training=announce)  # fmt: skip
        print(f"stored {len(database.runs_frame())} runs in {args.out / 'results.sqlite'}")


def _searched_per_split(runs: Runs) -> dict[int, dict[str, float]] | None:
    """A searched configuration's best values for each of its splits (None: not searched)."""
    if runs.extra is None:
        return None
    return dict.fromkeys(runs.replicates, runs.extra["values"])
