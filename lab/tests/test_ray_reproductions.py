"""The papers' reproductions on a real local Ray cluster (the library's cluster fixture of
tests/test_ray_sweeps.py: 2 CPUs, shared by the module): the overpruning and uci-depth
reproductions store their local rows and trials; a variance network whose worker is killed
resumes from its checkpoint; a depth unit (NumPyro) stores the local record."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import test_ray_sweeps
import torch
from stored_rows import stored_runs, stored_trials
from threadpoolctl import threadpool_limits

from vbnn.cli import main
from vbnn.core.contracts import Activation
from vbnn.stores import unit_store
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.executors import run_sweep
from vbnn_lab.variance_networks.budget import Budget
from vbnn_lab.variance_networks.runs import (
    NetworkRun,
    checkpoint_path,
    compute_run,
    run_key,
    store_run,
)

# The library's Ray test module (its import skips this one where Ray is switched off or absent):
# its 2-CPU cluster fixture, its warning filter for the cluster's start and its xdist group.
cluster, pytestmark, ray = test_ray_sweeps.cluster, test_ray_sweeps.pytestmark, test_ray_sweeps.ray
# workers cannot import this test module: send its unit functions by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_overpruning_on_ray_stores_the_local_runs_and_trials(
    cluster: str, data_dir: Path, tmp_path: Path
) -> None:
    tiny = ["reproduce", "overpruning", "--datasets", "yacht", "--methods", "map,es",
            "--splits", "0-1", "--iterations", "30", "--trials", "3", "--no-figures",
            "--no-progress"]  # fmt: skip
    assert main([*tiny, "--out", str(tmp_path / "local"), "--executor", "local"]) == 0
    assert main([*tiny, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 0
    local, remote = tmp_path / "local" / "results.sqlite", tmp_path / "ray" / "results.sqlite"
    assert len(stored_runs(local)) == 4 and stored_runs(remote) == stored_runs(local)
    # the trials a worker ran on its in-memory copy of each study, stored by the driver
    assert len(stored_trials(local)) == 2 * 3 and stored_trials(remote) == stored_trials(local)


def test_uci_depth_on_ray_stores_the_local_runs_metrics_and_trials(
    cluster: str, data_dir: Path, tmp_path: Path
) -> None:
    tiny = ["reproduce", "uci-depth", "--datasets", "yacht", "--methods", "mf,es", "--depths",
            "1,2", "--splits", "0-1", "--iterations", "30", "--trials", "2",
            "--no-progress"]  # fmt: skip
    assert main([*tiny, "--out", str(tmp_path / "local"), "--executor", "local"]) == 0
    assert main([*tiny, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 0
    local, remote = tmp_path / "local" / "results.sqlite", tmp_path / "ray" / "results.sqlite"
    assert len(stored_runs(local)) == 2 * 2 * 2 and stored_runs(remote) == stored_runs(local)
    # MF stores its pruned units per layer with each split
    assert sum('"pruned_per_layer"' in row[6] for row in stored_runs(remote)) == 4
    assert len(stored_trials(local)) == 2 * 2 * 2 and stored_trials(remote) == stored_trials(local)


# A Budget of the variance-networks reproduction on random images: 10 steps of batch 100 an
# epoch, so that a worker killed right after epoch 1's checkpoint dies inside epoch 2.
VN_BUDGET = Budget("ray-test", 1000, 32, 3, 2, 32, 16, 5, 10, 32)


def _vn_data() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(3)
    images = torch.rand(1032, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (1032,), generator=generator)
    return images[:1000], labels[:1000], images[1000:], labels[1000:]


def _compute_run_killed_once(run: NetworkRun, data: tuple, out: Path, marks: Path):
    """compute_run on a worker; on the first attempt the worker kills itself (SIGKILL) as soon
    as epoch 1's checkpoint exists, keeping a copy of that checkpoint."""
    with (marks / "attempts").open("a") as attempts:
        attempts.write(f"{os.getpid()}\n")
    if len((marks / "attempts").read_text().split()) == 1:
        checkpoint = checkpoint_path(out, run)

        def kill_after_epoch_1() -> None:
            while not checkpoint.exists():
                time.sleep(0.005)
            shutil.copy(checkpoint, marks / "epoch1.pt")
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=kill_after_epoch_1, daemon=True).start()
    return compute_run(run, data, out)


def test_variance_network_on_ray_resumes_from_its_checkpoint_after_a_kill(
    cluster: str, tmp_path: Path
) -> None:
    # table1-layer is tracked, with the kappa counter: both travel in the checkpoint
    run = NetworkRun("table1-layer", VN_BUDGET, 0)
    data = _vn_data()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as on a Ray worker (one CPU a unit)
    try:
        local_arrays, local_record = compute_run(run, data, tmp_path / "local")
    finally:
        torch.set_num_threads(threads)
    out, marks = tmp_path / "ray", tmp_path / "marks"
    marks.mkdir()
    unit = Unit(run.name, _compute_run_killed_once, (run, data, out, marks))
    run_sweep(ExecutorSettings(kind=ExecutorKind.RAY), [unit],
              lambda unit, outcome: store_run(run, out, outcome),
              progress=False)  # fmt: skip
    assert len(set((marks / "attempts").read_text().split())) == 2  # killed, then retried
    stored = unit_store.load(out / "runs", run_key(run))
    assert stored is not None and not checkpoint_path(out, run).exists()
    arrays, record = stored
    # the retry continued after epoch 1: that epoch's time is the killed attempt's, not re-timed
    first = torch.load(marks / "epoch1.pt", weights_only=True)
    first_seconds = first["records"]["history"][0]["seconds"]
    assert first["epoch"] == 1 and record["epoch_seconds"][0] == first_seconds
    # ... and ended with the numbers of an uninterrupted local run
    assert record["accuracy"] == local_record["accuracy"]
    assert record["elbo"] == local_record["elbo"]
    assert record["tracking"] == local_record["tracking"]
    assert arrays.keys() == local_arrays.keys()
    for key, value in local_arrays.items():
        np.testing.assert_array_equal(arrays[key], value, err_msg=key)


@pytest.mark.slow  # JAX compiles NUTS here and on the worker: about 30 s
def test_depth_units_on_ray_store_the_local_records(cluster: str, tmp_path: Path) -> None:
    pytest.importorskip("numpyro", reason="pip install 'vbnn[jax]'")
    # imported here: the depth experiment needs the optional jax extra, the rest of this module not
    from vbnn.references.jax_nuts import ChainsConfig
    from vbnn_lab.depth.models import PretrainConfig
    from vbnn_lab.depth.report import run_units
    from vbnn_lab.depth.units import UnitSettings

    chains = ChainsConfig(chains=2, warmup=5, samples=10, max_tree_depth=3)
    units = [
        UnitSettings(Activation.RELU, depth=depth, repeat=0, points=100,
                     pretrain=PretrainConfig(epochs=1, mean_epochs=1), chains=chains)
        for depth in (2,)
    ]  # fmt: skip
    # one thread for torch and for NumPy's BLAS, as on a 1-CPU Ray worker: the float64 KLs and
    # W2 distances then sum in the same order (with 2 BLAS threads they differ in the 14th digit)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            local = run_units(units, tmp_path / "local")
    finally:
        torch.set_num_threads(threads)
    remote = run_units(units, tmp_path / "ray", ExecutorSettings(kind=ExecutorKind.RAY))
    assert len(list((tmp_path / "ray" / "samples").glob("*.npz"))) == 1  # stored by the driver

    def untimed(record: dict) -> str:  # JSON: NaN diagnostics compare equal
        return json.dumps({k: v for k, v in record.items() if "second" not in k}, sort_keys=True)

    assert [untimed(r) for r in remote] == [untimed(r) for r in local]
