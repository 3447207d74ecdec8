"""Milliseconds per training step of data-parallel ``vbnn.train``: two CPU processes (gloo, one
torch thread each) against one process, on the same global batch.

    python benchmarks/ddp_step.py --rounds 5 --steps 40 --batches 128 1024 \
        --out benchmarks/results/ddp_step.json

A step is one step of ``vbnn.train`` (objective "elbo", Adam): the forward pass of the process's
shard of a global batch of B examples (each of ``--batches``), the KL, the backward pass, (two
processes) the all-reduce of the shard-weighted gradients, and Adam's update. Networks,
converted to ``mf``:

* ``mnist-mlp``: 784-400-400-10, ReLU, random MNIST-shaped inputs and 10 labels (3.8 MB of
  gradients a step);
* ``small-mlp``: 8-32-2, ReLU (a step of little arithmetic: the all-reduce's latency shows).

Arms: ``1 process, 1 thread``, ``1 process, 2 threads`` (the same two cores as the two
processes, used by torch's intra-op threads) and ``2 processes, 1 thread each`` (``torchrun
--nproc-per-node 2``). Each arm is a fresh worker that trains one warm-up epoch and one timed
epoch of ``--steps`` steps and reports the timed epoch's "seconds" (its steps only) per step;
in each of ``--rounds`` rounds every arm runs once, in turn, so a change of the machine's load
reaches every arm alike. Reported: the median over rounds of the milliseconds a step and of the
ratio to ``1 process, 1 thread`` in the same round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import vbnn

NETWORKS = {"mnist-mlp": (784, 400, 400, 10), "small-mlp": (8, 32, 2)}
ARMS = {  # name -> (processes, threads a process)
    "1 process, 1 thread": (1, 1),
    "1 process, 2 threads": (1, 2),
    "2 processes, 1 thread each": (2, 1),
}


def worker(network: str, batch: int, steps: int, threads: int) -> None:
    """Train ``network`` for a warm-up and a timed epoch; process 0 prints ms a step as JSON."""
    torch.set_num_threads(threads)
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")
    sizes = NETWORKS[network]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch * steps, sizes[0], generator=generator)
    y = torch.randint(0, sizes[-1], (batch * steps,), generator=generator)
    layers: list[nn.Module] = []
    for inputs, outputs in itertools.pairwise(sizes):
        layers += [nn.Linear(inputs, outputs), nn.ReLU()]
    torch.manual_seed(0)
    net = vbnn.convert(nn.Sequential(*layers[:-1]), "mf")
    result = vbnn.train(net, (x, y), batch_size=batch, epochs=2, seed=0, progress=False)
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(json.dumps({"ms": 1000 * result.history[1]["seconds"] / steps}))
    if dist.is_initialized():
        dist.barrier()  # every process done before gloo is torn down
        dist.destroy_process_group()


def run_arm(network: str, arm: str, batch: int, steps: int) -> float:
    """Milliseconds a step of ``arm``, from a fresh worker (``torchrun`` for two processes)."""
    processes, threads = ARMS[arm]
    here = Path(__file__).resolve()
    source = here.parents[1] / "src"
    path = os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": path}
    command = [sys.executable]
    if processes > 1:
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        command += ["-m", "torch.distributed.run", f"--nproc-per-node={processes}",
                    "--master-addr=127.0.0.1", f"--master-port={port}"]  # fmt: skip
    command += [str(here), "--worker", network, "--batch", str(batch), "--steps", str(steps),
                "--threads", str(threads)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{arm} on {network} failed:\n{done.stdout}\n{done.stderr}")
    line = [row for row in done.stdout.splitlines() if row.startswith("{")][-1]
    return float(json.loads(line)["ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=list(NETWORKS))
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 1024],
                        help="global batches B")  # fmt: skip
    parser.add_argument("--batch", type=int, default=128, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per worker")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", choices=list(NETWORKS), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.batch, args.steps, args.threads)
        return
    report: dict = {"machine": platform.platform(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "steps": args.steps, "rounds": args.rounds,
                    "runs": {}}  # fmt: skip
    for network in args.networks:
        for batch in args.batches:
            times: dict[str, list[float]] = {arm: [] for arm in ARMS}
            for _ in range(args.rounds):
                for arm in ARMS:
                    times[arm].append(run_arm(network, arm, batch, args.steps))
            base = times["1 process, 1 thread"]
            rows = {
                arm: {"ms": statistics.median(ms), "rounds_ms": ms,
                      "ratio": statistics.median(t / b for t, b in zip(ms, base, strict=True))}
                for arm, ms in times.items()
            }  # fmt: skip
            report["runs"][f"{network}, B={batch}"] = rows
            for arm, row in rows.items():
                print(f"{network:10s} B={batch:<5d} {arm:27s} {row['ms']:8.2f} ms/step  "
                      f"x{row['ratio']:.2f}", flush=True)  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
