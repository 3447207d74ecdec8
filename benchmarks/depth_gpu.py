"""Where a depth unit's sampling time goes on each JAX device: gradients alone and batched, MAMS.

For every (points, depth) of the ReLU depth units (``UnitSettings``: two moons, the widest net of
that depth with at most 1000 parameters), on every device JAX sees (the CPU, and a GPU where
there is one):

* ``gradient`` rows: one jit-compiled value and gradient of the unit's potential, for one
  parameter vector and for ``--batches`` of them at once (``jax.vmap``, as many chains advancing
  together would use it): seconds a call and milliseconds per chain-gradient (call / batch).
* ``mams`` rows (``--mams-points``, ``--mams-depths``): the MAMS chain of
  ``vbnn.references.jax_mclmc`` (tuning and sampling in one compiled function), run for a short
  budget from a N(0, 0.1^2) start, one chain alone and ``--mams-chains`` chains vmapped; compile
  seconds apart from run seconds, and the run's milliseconds per gradient (integration steps x 2
  over every chain), the number to multiply a unit's gradient count by.

Rows go to ``--out`` (CSV) as they finish, so a run stopped at its time limit keeps them. The CPU
is timed as the depth runs use it, on one thread:

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
      PYTHONPATH=src python benchmarks/depth_gpu.py --out benchmarks/results/depth_gpu.csv
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.references.chain_runner import GRADIENTS_PER_STEP
from vbnn.references.jax_mclmc import mams_chain
from vbnn.references.jax_nuts import ChainsConfig
from vbnn.references.jax_potential import jax_potential
from vbnn.stores.atomic import write_atomic
from vbnn_lab.depth.models import parameter_count
from vbnn_lab.depth.units import UnitSettings, two_moons


def seconds_per_call(function, argument, calls: int) -> tuple[float, float]:
    """(compile + first call, mean of ``calls`` further calls) in seconds."""
    began = time.perf_counter()
    jax.block_until_ready(function(argument))
    first = time.perf_counter() - began
    began = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(function(argument))
    return first, (time.perf_counter() - began) / calls


def unit_potential(points: int, depth: int):
    settings = UnitSettings(Activation.RELU, depth, 0, points=points)
    x, y = two_moons(points, settings.noise, settings.seed * 1000, torch.float32)
    architecture = settings.architecture()
    return jax_potential(architecture, x.numpy(), y.numpy()), architecture


def gradient_rows(device, points: int, depth: int, batches: list[int], calls: int) -> list[dict]:
    rows = []
    with jax.default_device(device):
        potential, architecture = unit_potential(points, depth)
        size = parameter_count(list(architecture.sizes))
        gradient = jax.value_and_grad(potential)
        for batch in batches:
            function = jax.jit(gradient if batch == 1 else jax.vmap(gradient))
            shape = (size,) if batch == 1 else (batch, size)
            theta = jnp.asarray(np.random.default_rng(0).normal(0, 0.1, shape), jnp.float32)
            first, each = seconds_per_call(function, theta, calls)
            rows.append(
                {
                    "kind": "gradient", "device": device.platform, "points": points,
                    "depth": depth, "parameters": size, "batch": batch,
                    "compile_seconds": first, "seconds_per_call": each,
                    "ms_per_chain_gradient": 1000 * each / batch,
                }
            )  # fmt: skip
    return rows


def mams_rows(device, points: int, depth: int, chains: int, budget: tuple[int, int]) -> list[dict]:
    rows = []
    config = ChainsConfig(chains=chains, warmup=budget[0], samples=budget[1], max_tree_depth=10)
    with jax.default_device(device):
        potential, architecture = unit_potential(points, depth)
        size = parameter_count(list(architecture.sizes))
        chain = mams_chain(potential, config)
        for together in sorted({1, chains}):
            keys = jax.random.split(jax.random.PRNGKey(0), together)
            starts = jnp.asarray(
                np.random.default_rng(1).normal(0, 0.1, (together, size)), jnp.float32
            )
            function = jax.jit(jax.vmap(chain))
            began = time.perf_counter()
            compiled = function.lower(keys, starts).compile()
            compile_seconds = time.perf_counter() - began
            began = time.perf_counter()
            per_draw, per_chain = jax.block_until_ready(compiled(keys, starts))
            run = time.perf_counter() - began
            sampling = GRADIENTS_PER_STEP * float(np.asarray(per_draw["steps"]).sum())
            tuning = float(np.asarray(per_chain["tuning_gradients"]).sum())
            rows.append(
                {
                    "kind": "mams", "device": device.platform, "points": points, "depth": depth,
                    "parameters": size, "batch": together, "warmup": budget[0],
                    "samples": budget[1], "compile_seconds": compile_seconds,
                    "run_seconds": run, "gradients": sampling + tuning,
                    "ms_per_chain_gradient": 1000 * run / (sampling + tuning),
                    "step_size": " / ".join(
                        f"{e:.3g}" for e in np.asarray(per_chain["step_size"])
                    ),
                }
            )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="1000,10000")
    parser.add_argument("--depths", default="1,2,3,4,5")
    parser.add_argument("--batches", default="1,4,64,512")
    parser.add_argument("--cpu-batches", default="1,4")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--mams-points", default="10000")
    parser.add_argument("--mams-depths", default="1,5")
    parser.add_argument("--mams-chains", type=int, default=4)
    parser.add_argument("--mams-budget", default="200,200", help="warm-up,samples per chain")
    parser.add_argument("--devices", default="gpu,cpu", help="those JAX has, in this order")
    parser.add_argument("--mams-devices", default="gpu", help="(CPU: the depth runs' units)")
    parser.add_argument("--out", default="benchmarks/results/depth_gpu.csv")
    args = parser.parse_args()
    ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731
    found = {}
    for platform_name in args.devices.split(","):
        try:
            found[platform_name] = jax.devices(platform_name)[0]
        except RuntimeError:
            print(f"no {platform_name} device: skipped")
    rows: list[dict] = []
    out = Path(args.out)
    software = f"jax {jax.__version__}, {platform.processor() or platform.machine()}"

    def record(device, new: list[dict]) -> None:
        for row in new:
            row["device_name"] = str(getattr(device, "device_kind", device.platform))
            row["software"] = software
            print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()})
        rows.extend(new)
        write_atomic(out, pd.DataFrame(rows).to_csv(index=False).encode())

    for name, row_device in found.items():
        batches = ints(args.batches if name == "gpu" else args.cpu_batches)
        for points in ints(args.points):
            for depth in ints(args.depths):
                record(row_device, gradient_rows(row_device, points, depth, batches, args.calls))
    budget = tuple(ints(args.mams_budget))
    for name, row_device in found.items():
        if name not in args.mams_devices.split(","):
            continue
        for points in ints(args.mams_points):
            for depth in ints(args.mams_depths):
                record(row_device, mams_rows(row_device, points, depth, args.mams_chains, budget))


if __name__ == "__main__":
    main()
