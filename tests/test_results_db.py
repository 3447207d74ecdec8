"""Results database: keys, resumption after SIGKILL, coexistence with Optuna, bad files."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vbnn.core.contracts import SplitResult
from vbnn.data import load_uci
from vbnn.regression.engine import run_splits
from vbnn.regression.methods import method_config
from vbnn.stores.results_db import (
    ResultsDatabase,
    ResultsDatabaseError,
    config_hash,
    optuna_storage,
)

SRC = Path(__file__).resolve().parents[1] / "src"
SPLITS = list(range(6))
SWEEP = method_config("mf", iterations=100, test_samples=10, chunk_size=1, seed=3)

SCRIPT = """
import sys
from vbnn.data import load_uci
from vbnn.regression.engine import run_splits
from vbnn.stores.results_db import ResultsDatabase
from vbnn.regression.methods import method_config

config = method_config("mf", iterations=100, test_samples=10, chunk_size=1, seed=3)
with ResultsDatabase(sys.argv[1]) as database:
    run_splits(load_uci("boston", sys.argv[2]), range(6), config, database=database)
"""


def _result(split: int, value: float) -> SplitResult:
    return SplitResult(split=split, test_log_likelihood=value, test_rmse=1.0, train_seconds=0.1)


def test_config_hash_ignores_seed_and_chunking_but_not_hyperparameters() -> None:
    base = method_config("gd", posterior_std=0.1)
    assert config_hash(base) == config_hash(method_config("gd", posterior_std=0.1,
                                                        seed=9, chunk_size=2))  # fmt: skip
    assert config_hash(base) != config_hash(method_config("gd", posterior_std=0.2))
    assert config_hash(base) != config_hash(base, extra={"tune": "once"})


def test_config_hash_of_stored_runs_survives_runtime_options() -> None:
    """The committed databases key their runs by these hashes (key version 3): where and how a
    run trains (``compile``, ``device``) must not change them, or a resumed run would train them
    again. A change of these values is a change of key version."""
    fast = {"compile": True, "device": "cuda:1", "chunk_size": 3}
    assert config_hash(method_config("mf")) == "bb6f92c73fabb59f"
    assert config_hash(method_config("mf", **fast)) == "bb6f92c73fabb59f"
    assert config_hash(method_config("fc", hidden=(50, 50), **fast)) == "9a81d1d3152fd3a5"


def test_write_read_missing_and_duplicate_key(tmp_path: Path) -> None:
    config = method_config("map", prior_std=0.5)
    with ResultsDatabase(tmp_path / "r.sqlite") as database:
        database.write_results("boston", config, [_result(0, -2.5), _result(2, -2.7)])
        assert database.missing_splits("boston", range(4), config) == [1, 3]
        assert database.has_run("boston", 2, config)
        assert not database.has_run("concrete", 2, config)
        other_seed = method_config("map", prior_std=0.5, seed=1)
        assert database.missing_splits("boston", [0], other_seed) == [0]
        with pytest.raises(sqlite3.IntegrityError):  # the batch is rolled back as a whole
            database.write_results("boston", config, [_result(1, -2.0), _result(2, -2.0)])
        assert database.missing_splits("boston", range(4), config) == [1, 3]
        assert [r.test_log_likelihood for r in database.read_results("boston", config)] == [
            -2.5,
            -2.7,
        ]
        frame = database.runs_frame()
        assert list(frame["split"]) == [0, 2] and set(frame["method"]) == {"map"}


def test_sigkilled_sweep_resumes_without_loss_or_duplicates(tmp_path: Path, data_dir: Path) -> None:
    path = tmp_path / "sweep.sqlite"
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent(SCRIPT))
    environment = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, str(script), str(path), str(data_dir)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    stored = 0
    deadline = time.monotonic() + 300  # the child imports torch and trains: minutes on busy cores
    while stored < 1 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
        if path.exists():
            with sqlite3.connect(path, timeout=10) as reader:
                try:
                    stored = reader.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
                except sqlite3.OperationalError:  # the table is not created yet
                    stored = 0
    assert process.poll() is None, f"sweep ended early: {process.stderr.read().decode()[-2000:]}"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()
    assert process.returncode == -signal.SIGKILL

    with ResultsDatabase(path) as database:
        before = database.stored_splits("boston", SWEEP)
        assert 1 <= len(before) < len(SPLITS), before
        dataset = load_uci("boston", data_dir)
        trained: list[int] = []

        def record(stack) -> None:
            trained.extend(stack.data.split_ids)

        result = run_splits(dataset, SPLITS, SWEEP, on_stack=record, database=database)
        assert sorted(trained) == sorted(set(SPLITS) - before)  # only the missing ones ran
        assert [s.split for s in result.splits] == SPLITS
        counts = database.connection.execute(
            "SELECT split, COUNT(*) FROM runs GROUP BY dataset, split, method, config_hash, seed"
        ).fetchall()
        assert sorted(counts) == [(k, 1) for k in SPLITS]
        assert database.integrity_check() == "ok"
        # Nothing left to do: a second resume trains nothing and changes nothing.
        trained.clear()
        again = run_splits(dataset, SPLITS, SWEEP, on_stack=record, database=database)
        assert trained == [] and again.splits == result.splits
        # A split trained by the killed process equals the same split trained afresh here:
        # every model draws from its own streams, so resumption does not change the numbers.
        first = min(before)
        with ResultsDatabase(tmp_path / "fresh.sqlite") as fresh_database:
            (fresh,) = run_splits(dataset, [first], SWEEP, database=fresh_database).splits
        assert fresh.test_log_likelihood == pytest.approx(result.splits[first].test_log_likelihood)


def test_optuna_tables_coexist_with_runs(tmp_path: Path) -> None:
    import optuna

    path = tmp_path / "shared.sqlite"
    config = method_config("gd")
    with ResultsDatabase(path) as database:
        database.write_results("yacht", config, [_result(0, -1.0)])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="gd-yacht", storage=optuna_storage(path))
    study.optimize(lambda trial: (trial.suggest_float("x", -1, 1) - 0.2) ** 2, n_trials=3)
    loaded = optuna.load_study(study_name="gd-yacht", storage=optuna_storage(path))
    assert len(loaded.trials) == 3
    with ResultsDatabase(path) as database:
        assert database.stored_splits("yacht", config) == {0}
        assert database.integrity_check() == "ok"
        tables = {r[0] for r in database.connection.execute("SELECT name FROM sqlite_master")}
    assert {"runs", "studies", "trials"} <= tables


def test_corrupt_and_foreign_files_raise_clear_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not an SQLite file at all" * 100)
    with pytest.raises(ResultsDatabaseError, match=r"garbage\.sqlite"):
        ResultsDatabase(garbage)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE runs (name TEXT, score REAL)")
    connection.close()
    with pytest.raises(ResultsDatabaseError, match="not the vbnn schema"):
        ResultsDatabase(foreign)
