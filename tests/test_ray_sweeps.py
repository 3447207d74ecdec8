"""Sweeps on a real local Ray cluster (started here, 2 CPUs, shared by the module): a Ray sweep
stores exactly the local sweep's rows (and a unit the local executor's digits, whatever this
process's torch threads); a worker SIGKILLed mid-unit is retried and its unit stored once; a
driver SIGKILLed mid-sweep resumes, ending with the local executor's database.
The papers' reproductions on Ray are tested beside them, in the lab
(lab/tests/test_ray_reproductions.py, with this module's cluster)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from stored_rows import driven_rows, stored_runs

from vbnn.cli import main
from vbnn.core.contracts import SplitResult
from vbnn.regression.methods import method_config
from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.executors import run_sweep

if os.environ.get("VBNN_RAY_TESTS") == "0":
    pytest.skip("VBNN_RAY_TESTS=0: the Ray cluster tests are switched off", allow_module_level=True)
ray = pytest.importorskip("ray", reason="pip install 'vbnn[ray]'")
# ray.init starts its processes with fork + exec from this process. When an earlier test module
# imported JAX, JAX's at-fork hook warns that forking a multithreaded process may deadlock, and
# filterwarnings = error turns that warning into an error in the cluster's setup. Here the
# child execs at once, so the warning does not apply. Under `pytest -n N --dist loadgroup` the
# Ray tests (here and in the lab) run in one worker, one cluster at a time on the CI's 2 cores.
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning"),
    pytest.mark.xdist_group("ray"),
]

# 2 methods x 3 seeds x 2 splits, one split a unit: 12 units of a second or so each
GRID = """
[grid]
datasets = ["yacht"]
methods = ["map", "mf"]
seeds = [0, 1, 2]
splits = "0-1"
splits_per_unit = 1
[grid.hyperparameters]
iterations = [200]
"""
UNITS = 12


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A private 2-CPU Ray instance for the module; its address for drivers in subprocesses.

    Ray gives its node a fixed 30 s to register at startup; on cores busy with other work that
    can pass, so a start that timed out is tried again (twice) before the module errors.
    """
    for attempt in range(3):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
            break
        except Exception as error:  # Ray raises a bare Exception for this timeout
            ray.shutdown()
            if "timed out during startup" not in str(error) or attempt == 2:
                raise
    # workers cannot import this test module: send its unit functions by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()  # stops every process this instance started


@pytest.fixture(scope="module")
def local_rows(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> list[tuple]:
    """The rows the local executor stores for GRID (the reference for the Ray sweeps)."""
    folder = tmp_path_factory.mktemp("local")
    (folder / "grid.toml").write_text(GRID)
    command = ["sweep", str(folder / "grid.toml"), "--out", str(folder), "--no-progress",
               "--cpus-per-unit", "1"]  # one torch thread, as on a Ray worker  # fmt: skip
    assert main(command) == 0
    rows = stored_runs(folder / "results.sqlite")
    assert len(rows) == UNITS
    return rows


def _stored(path: Path) -> list[tuple]:
    """The rows so far ([] while the driver has not yet created the file and its table)."""
    try:
        return stored_runs(path) if path.exists() else []
    except sqlite3.OperationalError:
        return []


def test_the_address_probe_passes_a_ray_head(cluster: str) -> None:
    """The head's GCS answers the HTTP/2 preface as gRPC does (``check_reachable``)."""
    from vbnn.sweeps.ray_executor import check_reachable

    check_reachable(cluster, 10.0)


def test_ray_sweep_stores_the_local_rows(cluster: str, local_rows: list, tmp_path: Path) -> None:
    (tmp_path / "grid.toml").write_text(GRID)
    command = ["sweep", str(tmp_path / "grid.toml"), "--out", str(tmp_path), "--no-progress",
               "--executor", "ray"]  # fmt: skip
    assert main(command) == 0
    assert stored_runs(tmp_path / "results.sqlite") == local_rows


def test_a_unit_gives_the_same_digits_here_and_on_ray(
    cluster: str, data_dir: Path, tmp_path: Path
) -> None:
    """Units that declare no CPUs run on one torch thread on Ray and here, although this
    process runs on two."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        local = driven_rows(tmp_path / "local.sqlite", data_dir, ExecutorSettings())
    finally:
        torch.set_num_threads(before)
    on_ray = ExecutorSettings(kind=ExecutorKind.RAY)
    assert len(local) == 2
    assert driven_rows(tmp_path / "ray.sqlite", data_dir, on_ray) == local


def _pid_then_sleep(folder: Path, index: int) -> SplitResult:
    """A unit that leaves its worker's pid, then sleeps; a retry (pid file there) returns."""
    pid_file = folder / f"{index}.pid"
    with (folder / f"{index}.attempts").open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    if not pid_file.exists():
        pid_file.write_text(str(os.getpid()))
        time.sleep(4.0)
    return SplitResult(split=index, test_log_likelihood=-float(index), test_rmse=float(index),
                       train_seconds=0.0)  # fmt: skip


def test_worker_killed_mid_unit_is_retried_and_stored_once(cluster: str, tmp_path: Path) -> None:
    config = method_config("map")
    victim = tmp_path / "1.pid"

    def kill_when_started() -> None:
        deadline = time.monotonic() + 60
        while not victim.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # inside its sleep
        os.kill(int(victim.read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    units = [Unit(f"unit {k}", _pid_then_sleep, (tmp_path, k)) for k in range(3)]
    with ResultsDatabase(tmp_path / "results.sqlite") as database:
        run_sweep(ExecutorSettings(kind=ExecutorKind.RAY), units,
                  lambda unit, value: database.write_results("toy", config, [value]),
                  progress=False)  # fmt: skip
        killer.join()
        frame = database.runs_frame()
    assert sorted(frame["split"]) == [0, 1, 2]  # each unit exactly once
    attempts = (tmp_path / "1.attempts").read_text().split()
    assert len(attempts) == 2 and attempts[0] != attempts[1]  # killed, then rerun elsewhere
    assert frame.set_index("split").loc[1, "test_rmse"] == 1.0


def test_driver_killed_mid_sweep_resumes_to_the_local_database(
    cluster: str, local_rows: list, tmp_path: Path
) -> None:
    (tmp_path / "grid.toml").write_text(GRID)
    database = tmp_path / "results.sqlite"
    command = [sys.executable, "-m", "vbnn.cli", "sweep", str(tmp_path / "grid.toml"),
               "--out", str(tmp_path), "--no-progress", "--executor", "ray",
               "--address", cluster]  # fmt: skip
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        stored: list = []
        deadline = time.monotonic() + 120
        while len(stored) < 2 and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.1)
            stored = _stored(database)
    finally:
        driver.send_signal(signal.SIGKILL)
        _, errors = driver.communicate()
    assert driver.returncode == -signal.SIGKILL, errors.decode()[-2000:]
    stored = stored_runs(database)
    assert 2 <= len(stored) < UNITS  # killed mid-sweep
    # the same command again: trains only the missing units
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert f"{UNITS - len(stored)} to train" in finished.stderr
    assert stored_runs(database) == local_rows
