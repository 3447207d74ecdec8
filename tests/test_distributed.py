"""Data-parallel ``vbnn.train``: two CPU processes (gloo, started by ``torchrun``) train to the
numbers of one process on the same global batch, and a killed two-process run resumes to the
numbers of one that was never stopped.

The reference of a noisy objective is a single-process ``vbnn.train`` of the global batches
whose weight noise is that of the processes (``ShardedNoise``: the rows of process p's shard of
each batch draw from process p's streams, ``distributed.rank_noise``); with distinct streams no
other single-process run draws the same noise. The MAP objective draws none, so its reference is
a plain single-process run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import vbnn
from vbnn.core.randomness import ModelGenerators
from vbnn.training import distributed
from vbnn.training.batches import TensorBatches
from vbnn.training.distributed import Processes
from vbnn.training.settings import Objective

SEED = 7
EXAMPLES, BATCH = 203, 50  # steps of 50, 50, 50, 50 and 3 examples: the last shared out 2 + 1
WORLD = 2
# name -> (family, likelihood, objective, optimizer)
CASES = {
    "mf": ("mf", "gaussian", "elbo", "adam"),
    "vd-weight": ("vd-weight", "categorical", "elbo", "adam"),
    "ivon": ("mf", "categorical", "elbo", "ivon"),
    "map": ("mf", "gaussian", "map", "adam"),
}
OPTIONS = {"mf": {"init_std": 0.1}, "vd-weight": {}}  # noise that moves the means
RTOL = 1e-5

# argv: the output folder, a checkpoint folder ("-" for none), the training forward pass at
# which each process writes its pid and waits to be killed (0: never), the cases to train
CHILD = """
import os, sys, time
from pathlib import Path
import torch
import torch.distributed as dist
from test_distributed import train_case

torch.set_num_threads(1)
if os.environ["CHILD_INITIALISES"] == "1":  # else vbnn.train must
    dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
out, checkpoint, pause_at = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
calls = 0

def pause(module, inputs):
    global calls
    if module.training:
        calls += 1
        if calls == pause_at:
            (out / f"paused-{rank}").write_text(str(os.getpid()))
            time.sleep(600)

results = {
    name: train_case(name, checkpoint=None if checkpoint == "-" else checkpoint, hook=pause)
    for name in sys.argv[4:]
}
world = dist.get_world_size()
torch.save({"results": results, "calls": calls, "world": world}, out / f"rank-{rank}.pt")
dist.barrier()  # no process tears gloo down while another is still in a collective
dist.destroy_process_group()
"""


def problem(likelihood: str) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """(x, y) of the training and the validation data: x (N, 3); y (N, 1) reals or 3 labels."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(EXAMPLES + 64, 3, generator=generator)
    if likelihood == "gaussian":
        y = torch.sin(x.sum(1, keepdim=True)) + 0.1 * torch.randn(len(x), 1, generator=generator)
    else:
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return (x[:EXAMPLES], y[:EXAMPLES]), (x[EXAMPLES:], y[EXAMPLES:])


def train_case(
    name: str, noise: Any = None, checkpoint: str | None = None, hook: Any = None
) -> dict[str, Any]:
    """Train case ``name`` (3 epochs of the batches above, validation, patience 2); its trained
    state, history and best epoch."""
    family, likelihood, objective, optimizer = CASES[name]
    data, validation = problem(likelihood)
    torch.manual_seed(0)
    outputs = 1 if likelihood == "gaussian" else 3
    network = vbnn.convert(nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, outputs)),
                           family, **OPTIONS[family])  # fmt: skip
    if hook is not None:
        network.register_forward_pre_hook(hook)
    result = vbnn.train(
        network, data, objective=objective, optimizer=optimizer, epochs=3, batch_size=BATCH,
        learning_rate=1e-2, validation=validation, patience=2, seed=SEED, progress=False,
        noise=noise, checkpoint=checkpoint,
    )  # fmt: skip
    return {
        "network": network.state_dict(),
        "likelihood": result.likelihood.state_dict(),
        "history": [{k: v for k, v in row.items() if k != "seconds"} for row in result.history],
        "best_epoch": result.best_epoch,
    }


class ShardedNoise:
    """The training noise of the processes of a data-parallel run, for one process: a draw of
    (B, ...) per-example noise (the LRT's) takes the rows of process p's shard from p's
    streams."""

    def __init__(self, seed: int, world: int) -> None:
        self.processes = [Processes(rank, world) for rank in range(world)]
        self.streams = [distributed.rank_noise(seed, 1, p, torch.device("cpu"))
                        for p in self.processes]  # fmt: skip

    def randn(self, *shape: int, dtype=torch.float32, device=None) -> torch.Tensor:
        rows = [distributed.shard(shape[0], p) for p in self.processes]
        parts = [stream.randn(part.stop - part.start, *shape[1:], dtype=dtype, device=device)
                 for stream, part in zip(self.streams, rows, strict=True)]  # fmt: skip
        return torch.cat(parts, dim=1)

    def get_state(self) -> list[list[torch.Tensor]]:
        return [stream.get_state() for stream in self.streams]

    def set_state(self, state: list[list[torch.Tensor]]) -> None:
        for stream, saved in zip(self.streams, state, strict=True):
            stream.set_state(saved)


def torchrun(
    out: Path, checkpoint: str, pause_at: int, *cases: str, initialise: bool = True
) -> subprocess.Popen:
    """Start the child script in 2 processes (one torch thread each) with ``torchrun``; with
    ``initialise`` False the script leaves the process group to ``vbnn.train``."""
    script = out / "child.py"
    script.write_text(CHILD)
    tests = Path(__file__).resolve().parent
    source = Path(vbnn.__file__).resolve().parents[1]
    path = os.pathsep.join([str(source), str(tests), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": "1",
        "CHILD_INITIALISES": str(int(initialise)),
    }
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={WORLD}",
               "--master-addr=127.0.0.1", f"--master-port={port}", str(script), str(out),
               checkpoint, str(pause_at), *cases]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


def finish(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output
    return output


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> tuple[str, list[dict[str, Any]]]:
    """The output of one torchrun launch of every case in 2 processes whose script leaves the
    process group to ``vbnn.train``, and what each process saved (the killed run's script
    initialises it: the two give the same numbers)."""
    out = tmp_path_factory.mktemp("two-processes")
    output = finish(torchrun(out, "-", 0, *CASES, initialise=False))
    files = [out / f"rank-{rank}.pt" for rank in range(WORLD)]
    return output, [torch.load(file, weights_only=True) for file in files]


@pytest.fixture(scope="module")
def two_processes(launch) -> list[dict[str, Any]]:
    """What each of the 2 processes trained, case by case."""
    return [saved["results"] for saved in launch[1]]


def assert_states_close(trained: dict, reference: dict, rtol: float) -> None:
    assert trained.keys() == reference.keys()
    for name, value in reference.items():
        scale = float(value.abs().max())
        torch.testing.assert_close(
            trained[name],
            value,
            rtol=rtol,
            atol=rtol * scale,
            msg=lambda message, name=name: f"{name}: {message}",
        )


@pytest.mark.parametrize("case", list(CASES))
def test_two_processes_train_to_the_numbers_of_one(case: str, two_processes) -> None:
    first, second = (results[case] for results in two_processes)
    for part in ("network", "likelihood"):  # the processes hold the same numbers
        for name, value in first[part].items():
            assert torch.equal(value, second[part][name]), f"{part} {name}"
    assert first["history"] == second["history"] and first["best_epoch"] == second["best_epoch"]

    noisy = CASES[case][2] == "elbo"
    reference = train_case(case, noise=ShardedNoise(SEED, WORLD) if noisy else None)
    assert_states_close(first["network"], reference["network"], RTOL)
    assert_states_close(first["likelihood"], reference["likelihood"], RTOL)
    assert first["best_epoch"] == reference["best_epoch"]
    for row, expected in zip(first["history"], reference["history"], strict=True):
        assert row.keys() == expected.keys()
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=RTOL), (row["epoch"], key)


def test_a_launch_without_a_process_group_has_it_initialised_with_a_warning(launch) -> None:
    """torchrun with no init_process_group: vbnn.train initialises gloo once a process (process
    0 says so) and the processes train the data-parallel run (the numbers of
    ``test_two_processes_train_to_the_numbers_of_one``), not independent copies."""
    output, saved = launch
    assert output.count("initialised torch.distributed (gloo)") == 1, output
    assert [run["world"] for run in saved] == [WORLD, WORLD]


def test_a_launch_without_the_launchers_variables_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(
        ValueError,
        match=r"MASTER_ADDR, MASTER_PORT unset.*torchrun "
        r"--nproc-per-node 2 script.py.*init_process_group",
    ):
        train_case("map")
    assert not torch.distributed.is_initialized()
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' in the environment"):
        train_case("map")
    monkeypatch.setenv("WORLD_SIZE", "1")  # a launch of one process: trained here, alone
    assert train_case("map")["best_epoch"] >= 1


def test_a_killed_two_process_run_resumes_to_the_same_numbers(tmp_path, two_processes) -> None:
    checkpoint = tmp_path / "checkpoint"
    killed = torchrun(tmp_path, str(checkpoint), 8, "mf")  # step 3 of epoch 2
    deadline = time.monotonic() + 240
    paused = [tmp_path / f"paused-{rank}" for rank in range(WORLD)]
    while not all(file.exists() and file.read_text() for file in paused):
        assert killed.poll() is None, killed.communicate()[0]
        assert time.monotonic() < deadline, "the processes never reached epoch 2"
        time.sleep(0.1)
    for file in paused:
        os.kill(int(file.read_text()), signal.SIGKILL)
    output, _ = killed.communicate(timeout=120)
    assert killed.returncode != 0, output
    assert torch.load(checkpoint / "training.pt", weights_only=True)["epoch"] == 1

    finish(torchrun(tmp_path, str(checkpoint), 0, "mf"))
    whole = two_processes[0]["mf"]
    for rank in range(WORLD):
        saved = torch.load(tmp_path / f"rank-{rank}.pt", weights_only=True)
        assert saved["calls"] == 2 * 5  # epochs 2 and 3 of 5 steps: it resumed, not restarted
        resumed = saved["results"]["mf"]
        for part in ("network", "likelihood"):
            for name, value in whole[part].items():
                assert torch.equal(resumed[part][name], value), f"process {rank}: {part} {name}"
        assert resumed["history"] == whole["history"]
    assert torch.load(checkpoint / "training.pt", weights_only=True)["epoch"] == 3


def test_shards_are_the_parts_of_tensor_split() -> None:
    for rows in (1, 2, 3, 7, 50):
        for world in (1, 2, 3):
            parts = torch.arange(rows).tensor_split(world)
            for rank, part in enumerate(parts):
                assert torch.arange(rows)[distributed.shard(rows, Processes(rank, world))].equal(
                    part
                )


def test_process_zero_draws_the_streams_of_one_process_and_the_others_their_own() -> None:
    cpu = torch.device("cpu")
    alone = ModelGenerators.for_keys(SEED, range(2), "train")
    draws = [distributed.rank_noise(SEED, 2, Processes(r, 3), cpu).randn(4) for r in range(3)]
    assert torch.equal(draws[0], alone.randn(4))
    rows = torch.cat(draws)  # 3 processes x 2 models
    assert len({tuple(row.tolist()) for row in rows}) == 6


def test_a_data_parallel_run_refuses_what_it_cannot_share_out() -> None:
    two = Processes(0, 2)
    data = TensorDataset(torch.randn(8, 3), torch.randn(8))
    with pytest.raises(ValueError, match="sgld"):
        distributed.check_parallel(two, Objective.SGLD, data=data)
    with pytest.raises(ValueError, match=r"^validation: a shuffling DataLoader .* global RNG"):
        distributed.check_parallel(two, Objective.ELBO, validation=DataLoader(data, shuffle=True))
    sampler = DistributedSampler(data, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match=r"^data: a DataLoader with a DistributedSampler"):
        distributed.check_parallel(two, Objective.ELBO, data=DataLoader(data, sampler=sampler))
    seeded = DataLoader(data, shuffle=True, generator=torch.Generator().manual_seed(0))
    distributed.check_parallel(two, Objective.ELBO, data=seeded, validation=None)
    distributed.check_parallel(Processes(), Objective.SGLD, data=DataLoader(data, shuffle=True))

    batches = TensorBatches(torch.randn(5, 3), torch.randn(5), 4, torch.Generator())
    sharded = distributed.shard_batches(batches, Processes(1, 2))
    sharded.epoch()
    assert sharded.batch(1)[0].shape == (2, 3)
    with pytest.raises(ValueError, match=r"batch 2 of the epoch holds 1 examples, fewer than"):
        sharded.batch(2)
