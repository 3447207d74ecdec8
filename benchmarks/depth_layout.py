"""Milliseconds per jit-compiled gradient of the depth units' potential in its layouts.

``vbnn.references.jax_potential`` runs the network feature-major: every hidden layer is a
(width, N) array, examples along the last axis, and the activation is a select; given ``chunk`` it
sums the examples that many at a time, recomputing each chunk's forward pass in the backward one.
The layout it replaced put examples first, (N, width), with max(h, 0) + slope * min(h, 0); it is
rebuilt here as the baseline. For depths 1-5 at 10,000 two-moons points (``UnitSettings``'
architecture and data; ``--points`` for another count), at a random parameter vector
(N(0, 0.5^2)), every variant's gradient is timed in turn on the CPU, each the fastest of
``--repeats`` rounds of ``--calls`` calls in this process's CPU time (so other processes on the
cores count less than in wall time), with the relative difference of each gradient from the
examples-first one (rounding only: the same products summed in another order).

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
    PYTHONPATH=src python benchmarks/depth_layout.py --out benchmarks/results/depth_layout.csv
    PYTHONPATH=src python benchmarks/depth_layout.py --points 1000 --chunks 125,250,500 \\
        --out benchmarks/results/depth_layout_1000.csv   # the same XLA_FLAGS
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.references.architecture import MLPArchitecture
from vbnn.references.jax_potential import FULL_FLOAT32, jax_potential, parameter_shapes
from vbnn_lab.depth.models import depth_widths
from vbnn_lab.depth.units import two_moons


def examples_first(architecture: MLPArchitecture, x: np.ndarray, y: np.ndarray) -> Callable:
    """The potential with (N, width) activations and max/min: the layout before."""
    shapes = parameter_shapes(architecture)
    cuts = np.cumsum([int(np.prod(shape)) for shape in shapes])[:-1]
    x, y, slope = jnp.asarray(x), jnp.asarray(y), architecture.slope

    def potential(theta: jax.Array) -> jax.Array:
        pieces, h = jnp.split(theta, cuts), x
        for layer in range(len(shapes) // 2):
            if layer:
                h = jnp.maximum(h, 0.0) + slope * jnp.minimum(h, 0.0)
            weight = pieces[2 * layer].reshape(shapes[2 * layer][1:])
            h = jnp.matmul(h, weight, precision=FULL_FLOAT32) + pieces[2 * layer + 1]
        logits = h[:, 0]
        bce = jnp.maximum(logits, 0) - logits * y + jnp.log1p(jnp.exp(-jnp.abs(logits)))
        return bce.sum() + 0.5 * architecture.prior_std**-2 * jnp.sum(theta**2)

    return potential


def milliseconds(gradient: Callable, theta: jax.Array, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        theta = theta + 1e-7 * gradient(theta)  # each call waits for the one before
    theta.block_until_ready()
    return (time.process_time() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=10_000, help="two-moons examples")
    parser.add_argument("--depths", default="1,2,3,4,5")
    parser.add_argument("--activation", default="leaky_relu", choices=["relu", "leaky_relu"])
    parser.add_argument("--chunks", default="500,1000,2000", help="examples per chunk to time")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="CSV to write (default: print only)")
    args = parser.parse_args()
    x, y = (t.numpy() for t in two_moons(args.points, 0.1, 0, torch.float32))
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        architecture = MLPArchitecture(tuple(depth_widths(depth)), Activation(args.activation), 0.2)
        size = sum(int(np.prod(shape)) for shape in parameter_shapes(architecture))
        theta = np.random.default_rng(depth).normal(scale=0.5, size=size).astype(np.float32)
        theta = jnp.asarray(theta)
        gradients = {
            "examples_first": jax.jit(jax.grad(examples_first(architecture, x, y))),
            "feature_major": jax.jit(jax.grad(jax_potential(architecture, x, y))),
        }
        for chunk in (int(c) for c in args.chunks.split(",")):
            potential = jax_potential(architecture, x, y, chunk=chunk)
            gradients[f"chunk_{chunk}"] = jax.jit(jax.grad(potential))
        results = {name: np.asarray(g(theta), np.float64) for name, g in gradients.items()}
        before = results["examples_first"]
        timings: dict[str, list[float]] = {name: [] for name in gradients}
        for _ in range(args.repeats):
            for name, gradient in gradients.items():
                timings[name].append(milliseconds(gradient, theta, args.calls))
        best = {f"{name}_ms": min(values) for name, values in timings.items()}
        chunked = [name for name in gradients if name.startswith("chunk_")]
        fastest_chunk = min(chunked, key=lambda name: best[f"{name}_ms"])
        rows.append(
            {
                "points": args.points,
                "depth": depth,
                "widths": "-".join(map(str, depth_widths(depth))),
                **best,
                "speed_up": best["examples_first_ms"] / best["feature_major_ms"],
                "chunked_speed_up": best["feature_major_ms"] / best[f"{fastest_chunk}_ms"],
                "fastest_chunk": int(fastest_chunk.removeprefix("chunk_")),
                "gradient_difference": max(
                    np.linalg.norm(v - before) / np.linalg.norm(before) for v in results.values()
                ),
            }
        )
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format="%.3g"))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
