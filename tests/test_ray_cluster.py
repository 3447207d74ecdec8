"""A sweep on a Ray cluster of several nodes that loses one mid-run: Ray's own test cluster on
this machine (``ray.cluster_utils.Cluster``), a head with no CPUs and two worker nodes of one CPU
each, so every unit runs on a worker node. The driver joins it by address, as ``--address``
does; one worker node is removed while a unit runs on it. That unit reruns on the other node,
every unit is stored once in the driver's database, and the rows are the local executor's."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from stored_rows import stored_runs

from vbnn.data import load_uci
from vbnn.regression.methods import method_config
from vbnn.regression.split_units import SplitUnits
from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.driver import Runs, train_missing

if os.environ.get("VBNN_RAY_TESTS") == "0":
    pytest.skip("VBNN_RAY_TESTS=0: the Ray cluster tests are switched off", allow_module_level=True)
ray = pytest.importorskip("ray", reason="pip install 'vbnn[ray]'")
cluster_utils = pytest.importorskip("ray.cluster_utils")
ray_executor = pytest.importorskip("vbnn.sweeps.ray_executor")
# the warning filter and the xdist group of the other Ray tests (tests/test_ray_sweeps.py): one
# Ray cluster at a time, in one worker of `pytest -n N --dist loadgroup`
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning"),
    pytest.mark.xdist_group("ray"),
]

# 2 methods x 3 splits, one split a unit: 6 units of about a second each
RUNS = [
    Runs("yacht", method_config(method, iterations=200, seed=0), (0, 1, 2))
    for method in ("map", "mf")
]
UNITS = 6
FINISHED_BEFORE_THE_LOSS = 2  # units finished before a unit waits for its node to go


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head node with no CPUs and two worker nodes of one CPU each, shut down afterwards.

    A node's health is checked every second: a node that stops answering counts as dead after
    five missed checks, not the default's fifteen seconds.
    """
    health = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}
    head = {"num_cpus": 0, "include_dashboard": False, "_system_config": health}
    nodes = cluster_utils.Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(2):
            nodes.add_node(num_cpus=1)
        nodes.wait_for_nodes()
        # the worker nodes cannot import this test module: its unit function goes by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        yield nodes
    finally:
        ray.shutdown()  # a driver the test left connected
        nodes.shutdown()  # stops every process of every node


def _traced(folder: Path, key: str, function: Any, *arguments: Any) -> Any:
    """Run a unit's ``function``, noting the node of every attempt (``attempts/``) and of the
    attempt that finished (``finished/``). The first unit to start once enough units finished
    claims ``victim`` (its node's id) and waits there until the test removes that node."""
    node = ray.get_runtime_context().get_node_id()
    name = key.replace(" ", "_")
    with (folder / "attempts" / name).open("a") as handle:
        handle.write(f"{node}\n")
    if len(os.listdir(folder / "finished")) >= FINISHED_BEFORE_THE_LOSS:
        try:
            claim = os.open(folder / "victim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass  # another unit is the victim, or this is the victim's rerun
        else:
            os.write(claim, node.encode())
            os.close(claim)
            time.sleep(120)  # ended by the node's removal
    value = function(*arguments)
    (folder / "finished" / name).write_text(node)
    return value


@dataclass(frozen=True)
class TracedUnits:
    """``SplitUnits`` of one split a unit, each unit's function run through :func:`_traced`."""

    units: SplitUnits
    folder: Path

    def __call__(self, runs: Runs, missing: list[int]) -> list[Unit]:
        return [
            Unit(unit.key, _traced, (self.folder, unit.key, unit.function, *unit.arguments),
                 unit.cpus)
            for unit in self.units(runs, missing)
        ]  # fmt: skip


def _remove_the_victims_node(nodes: Any, folder: Path, removed: list[str]) -> None:
    """Wait for a unit to claim ``victim``, then remove the worker node it runs on."""
    victim = folder / "victim"
    deadline = time.monotonic() + 120
    while not (victim.exists() and victim.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not victim.exists():
        return  # the test fails on the missing rerun
    node_id = victim.read_text()
    (node,) = [node for node in nodes.worker_nodes if node.node_id == node_id]
    nodes.remove_node(node)
    removed.append(node_id)


def test_a_sweep_survives_a_lost_node_and_stores_the_local_rows(
    cluster: Any, data_dir: Path, tmp_path: Path
) -> None:
    build = SplitUnits({"yacht": load_uci("yacht", data_dir)}, splits_per_unit=1)
    with ResultsDatabase(tmp_path / "local.sqlite") as database:
        train_missing(database, RUNS, build)
    local_rows = stored_runs(tmp_path / "local.sqlite")
    assert len(local_rows) == UNITS

    folder = tmp_path / "trace"
    for name in ("attempts", "finished"):
        (folder / name).mkdir(parents=True)
    removed: list[str] = []
    remover = threading.Thread(target=_remove_the_victims_node, args=(cluster, folder, removed))
    remover.start()
    stored: Counter[str] = Counter()
    settings = ExecutorSettings(kind=ExecutorKind.RAY, address=cluster.address)
    try:
        with ResultsDatabase(tmp_path / "results.sqlite") as database:
            train_missing(database, RUNS, TracedUnits(build, folder), settings,
                          on_stored=lambda unit, value: stored.update([unit.key]))  # fmt: skip
    finally:
        remover.join()

    assert len(removed) == 1  # a worker node left the cluster mid-run
    attempts = {path.name: path.read_text().split() for path in (folder / "attempts").iterdir()}
    finished = {path.name: path.read_text() for path in (folder / "finished").iterdir()}
    (victim,) = [name for name, nodes in attempts.items() if len(nodes) > 1]
    assert attempts[victim][0] == removed[0] != attempts[victim][1]  # rerun on the other node
    assert finished[victim] == attempts[victim][1]
    assert len(set(finished.values())) == 2  # units finished on both worker nodes
    assert len(stored) == UNITS and set(stored.values()) == {1}  # each unit stored once
    assert stored_runs(tmp_path / "results.sqlite") == local_rows


def test_a_unit_ray_gave_up_on_is_reported_with_the_reason() -> None:
    message = ray_executor.failure_message(ray.exceptions.WorkerCrashedError(), max_retries=3)
    assert message.startswith("Ray gave up on the unit after 3 retries (WorkerCrashedError")
