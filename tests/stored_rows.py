"""What a sweep stored, read straight from its SQLite file, for comparing two executors' runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path


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
