"""Sweeps in worker processes of this machine (``--executor processes``, no Ray): they store the
local executor's rows bit for bit at one torch thread a unit (a reproduction's rows and trials
too: lab/tests/test_reproduce_overpruning.py); a unit that raises, or whose worker is killed, is
reported and the rest are stored; the settings refuse what they cannot do."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from stored_rows import driven_rows, stored_runs

from vbnn.cli import main
from vbnn.core.contracts import SplitResult
from vbnn.regression.methods import method_config
from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.executors import SweepError, run_sweep

# 2 methods x 2 seeds x 2 splits, one split a unit: 8 units of a second or so each
GRID = """
[grid]
datasets = ["yacht"]
methods = ["map", "mf"]
seeds = [0, 1]
splits = "0-1"
splits_per_unit = 1
[grid.hyperparameters]
iterations = [200]
"""


def test_grid_in_two_processes_stores_the_local_rows(data_dir: Path, tmp_path: Path) -> None:
    rows = {}
    for name, executor in [("local", []), ("processes", ["--executor", "processes"])]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "grid.toml").write_text(GRID)
        command = ["sweep", str(tmp_path / name / "grid.toml"), "--out", str(tmp_path / name),
                   "--no-progress", "--cpus-per-unit", "1", *executor]  # fmt: skip
        if executor:
            command += ["--workers", "2"]
        assert main(command) == 0
        rows[name] = stored_runs(tmp_path / name / "results.sqlite")
    assert len(rows["local"]) == 8 and rows["processes"] == rows["local"]


def test_a_unit_gives_the_same_digits_here_and_in_a_worker_process(
    data_dir: Path, tmp_path: Path
) -> None:
    """Units declare no CPUs: each runs on one torch thread on both executors, here too although
    this process runs on two (and gets its two back)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        local = driven_rows(tmp_path / "local.sqlite", data_dir, ExecutorSettings())
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    processes = ExecutorSettings(kind=ExecutorKind.PROCESSES, workers=1)
    assert len(local) == 2
    assert driven_rows(tmp_path / "processes.sqlite", data_dir, processes) == local


def _result(folder: Path, index: int) -> SplitResult:
    """Unit ``index``'s result; unit 1 raises on its first call and unit 2's first worker dies."""
    first = not (folder / f"{index}.started").exists()
    (folder / f"{index}.started").touch()
    if first and index == 1:
        raise RuntimeError("unit 1 fails once")
    if first and index == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return SplitResult(split=index, test_log_likelihood=-float(index), test_rmse=float(index),
                       train_seconds=0.0)  # fmt: skip


def test_failed_and_killed_units_are_reported_and_a_rerun_stores_each_once(
    tmp_path: Path,
) -> None:
    config = method_config("map")
    settings = ExecutorSettings(kind=ExecutorKind.PROCESSES, workers=1)
    units = [Unit(f"unit {k}", _result, (tmp_path, k)) for k in range(4)]
    with ResultsDatabase(tmp_path / "results.sqlite") as database:

        def store(unit: Unit, value: SplitResult) -> None:
            database.write_results("toy", config, [value])

        with pytest.raises(SweepError) as failure:
            run_sweep(settings, units, store, progress=False)
        message = str(failure.value)
        assert "unit 1: RuntimeError: unit 1 fails once" in message
        assert "unit 2:" in message and "unit 0:" not in message  # 0 ran before the kill
        stored = set(database.runs_frame()["split"])
        assert 0 in stored and not {1, 2} & stored
        # the same sweep again, over what is not stored: every unit now succeeds
        missing = [unit for unit in units if unit.arguments[1] not in stored]
        run_sweep(settings, missing, store, progress=False)
        frame = database.runs_frame()
    assert sorted(frame["split"]) == [0, 1, 2, 3]  # each unit exactly once
    assert frame.set_index("split").loc[2, "test_rmse"] == 2.0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"workers": 2}, "--workers needs --executor processes"),
        ({"kind": ExecutorKind.PROCESSES, "workers": 0}, "--workers must be >= 1, got 0"),
        ({"kind": ExecutorKind.PROCESSES, "address": "auto"}, "--address needs --executor ray"),
    ],
)
def test_settings_name_the_argument_at_fault(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExecutorSettings(**settings)


def test_default_workers_fill_the_cpus_this_process_may_use() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert ExecutorSettings(kind=ExecutorKind.PROCESSES).process_count() == cpus
    two_each = ExecutorSettings(kind=ExecutorKind.PROCESSES, cpus_per_unit=2)
    assert two_each.process_count() == max(1, cpus // 2)
