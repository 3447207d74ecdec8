"""What a sweep stored, read straight from its SQLite file, for comparing two executors' runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from vbnn.data import load_uci
from vbnn.regression.methods import method_config
from vbnn.regression.split_units import SplitUnits
from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.contracts import ExecutorSettings
from vbnn.sweeps.driver import Runs, train_missing


def stored_runs(path: Path) -> list[tuple]:
    """Every row of the runs table, sorted; the columns that do not depend on timing."""
    with sqlite3.connect(path) as connection:
        return sorted(connection.execute(
            "SELECT dataset, split, method, config_hash, seed, hyperparameters, metrics, "
            "test_log_likelihood, test_rmse FROM runs"
        ).fetchall())  # fmt: skip


def stored_trials(path: Path) -> list[tuple]:
    """Every Optuna trial in the file: (study, number, state, value), sorted."""
    with sqlite3.connect(path) as connection:
        return sorted(connection.execute(
            "SELECT s.study_name, t.number, t.state, v.value FROM trials t JOIN studies s "
            "USING (study_id) LEFT JOIN trial_values v USING (trial_id)"
        ).fetchall())  # fmt: skip


def driven_rows(path: Path, data_dir: Path, settings: ExecutorSettings) -> list[tuple]:
    """Boston ES (100 iterations) on splits 0-1, one engine chunk, trained through the driver
    (``sweeps.driver``, ``regression.split_units.SplitUnits``) on the executor of ``settings``
    with the default CPUs of a unit; every stored row. ES on boston rounds differently on 1 and on 2
    torch threads, so equal rows mean equal thread counts."""
    dataset = load_uci("boston", data_dir)
    runs = [Runs("boston", method_config("es", iterations=100, seed=2), (0, 1))]
    with ResultsDatabase(path) as database:
        train_missing(database, runs, SplitUnits({"boston": dataset}), settings)
    return stored_runs(path)
