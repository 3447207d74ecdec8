"""Wall time of one reproduction's quick mode: the local executor vs Ray with 1 and 2 workers.

Runs ``vbnn reproduce overpruning --quick --no-figures`` on the data sets given (default: yacht,
its six methods tuned and trained on splits 0-4) three times, each into a fresh folder: with the
local executor (this process), then on a private Ray instance of 1 and of 2 CPUs (one unit per
CPU). Every unit runs torch on one thread (``--cpus-per-unit 1``), so the three databases hold
the same runs bit for bit (the script checks it) and the difference is Ray's overhead (its start
included) and parallelism.

    python benchmarks/ray_overhead.py --out benchmarks/results/ray_overhead.json

``--timed-tasks`` also prints, for every Ray task, the seconds its unit took inside the worker
(the worker's output reaches this process's log) and the driver's time of receipt, which
separates Ray's per-task cost from the work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import tempfile
import time
from pathlib import Path

import ray
import torch

import vbnn.sweeps.ray_executor as ray_executor
from vbnn.cli import main

COLUMNS = "dataset, split, method, config_hash, seed, metrics"


def timed_run(folder: Path, datasets: str, executor: list[str]) -> float:
    command = ["reproduce", "overpruning", "--quick", "--no-figures", "--no-progress",
               "--datasets", datasets, "--out", str(folder), *executor]  # fmt: skip
    began = time.perf_counter()
    if main(command) != 0:
        raise RuntimeError(f"vbnn {' '.join(command)} failed")
    return time.perf_counter() - began


def rows(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / "results.sqlite") as connection:
        return sorted(connection.execute(f"SELECT {COLUMNS} FROM runs").fetchall())


def _timed_call(function, cpus: int, *arguments):
    """The Ray executor's task body, printing the unit's own seconds from the worker."""
    began = time.perf_counter()
    torch.set_num_threads(cpus)
    result = function(*arguments)
    print(f"task: {time.perf_counter() - began:.2f} s in worker {os.getpid()}", flush=True)
    return result


def time_tasks() -> None:
    """Make the Ray executor time every task inside the worker and log each receipt."""
    ray_executor._remote_call = ray.remote(_timed_call)
    untimed_run = ray_executor.RayExecutor.run

    def run(self, units):
        began = time.perf_counter()
        for outcome in untimed_run(self, units):
            print(f"driver: {outcome.unit.key} received at {time.perf_counter() - began:.2f} s")
            yield outcome

    ray_executor.RayExecutor.run = run


def run(datasets: str) -> dict:
    record: dict = {"datasets": datasets, "torch_threads_local": torch.get_num_threads(),
                    "machine": platform.machine(), "cpu_count": os.cpu_count(),
                    "load_average_1min_before": os.getloadavg()[0]}  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        record["local_seconds"] = timed_run(base / "local", datasets, ["--cpus-per-unit", "1"])
        for cpus in (1, 2):
            began = time.perf_counter()
            ray.init(num_cpus=cpus, include_dashboard=False, logging_level="WARNING")
            start_seconds = time.perf_counter() - began
            try:
                seconds = timed_run(base / f"ray{cpus}", datasets, ["--executor", "ray"])
            finally:
                ray.shutdown()
            record[f"ray_{cpus}_workers_seconds"] = start_seconds + seconds
            record[f"ray_{cpus}_workers_start_seconds"] = start_seconds
            if rows(base / f"ray{cpus}") != rows(base / "local"):
                raise RuntimeError(f"Ray with {cpus} worker(s) stored other runs than local")
        record["runs"] = len(rows(base / "local"))
    record["load_average_1min_after"] = os.getloadavg()[0]
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="yacht")
    parser.add_argument("--out", type=Path, default=None, help="write the record as JSON")
    parser.add_argument("--timed-tasks", action="store_true", help="print every Ray task's time")
    args = parser.parse_args()
    if args.timed_tasks:
        time_tasks()
    record = run(args.datasets)
    text = json.dumps(record, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
