"""NUTS candidates on the depth experiment's model: samples/s and effective samples/s.

Model (issue 5's orientation setting): two moons (noise 0.1, 1000 points), a 2-16-16-1 ReLU
network (our ``MLP`` of ``Point`` layers, Bernoulli likelihood, N(0, 1) prior), started at
MFVI-pre-trained means (1+1 epochs), 100 warm-up + 200 samples, target acceptance 0.8.

Candidates: Pyro NUTS with the potential evaluated eagerly (``none``), as a ``torch.jit.trace``
graph (``trace``: what Pyro's ``jit_compile=True`` does for model-based potentials; Pyro ignores
the flag for a ``potential_fn``) and through ``torch.compile`` (``compile``).

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/nuts_samplers.py [--max-tree-depth 10]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.experiments.depth.models import (
    PretrainConfig,
    bernoulli_potential,
    point_network,
    train_mean_field,
)
from vbnn.experiments.depth.units import two_moons
from vbnn.references.nuts import Compilation, NUTSConfig, run_nuts


def export(args, x, y, potential, layout, start) -> None:
    """The problem as plain arrays, with U and its gradient at the start for a consistency check."""
    theta = start.clone().double().requires_grad_(True)
    value = potential(theta.to(start.dtype))
    (gradient,) = torch.autograd.grad(value, theta)
    shapes = np.zeros((len(layout.shapes), 3), dtype=np.int64)
    for row, shape in zip(shapes, layout.shapes, strict=True):
        row[: len(shape)] = shape
    np.savez(
        args.export,
        x=x.numpy(),
        y=y.numpy(),
        start=start.numpy(),
        shapes=shapes,
        potential=float(value.detach()),
        gradient=gradient.numpy(),
        settings=np.array([args.warmup, args.samples, args.max_tree_depth]),
    )
    print(f"exported to {args.export}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--max-tree-depth", type=int, default=10)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--compilations", default="none,trace,compile")
    parser.add_argument("--out", default="benchmarks/results/nuts_samplers.json")
    parser.add_argument("--export", default=None, help="write the problem for nuts_jax.py and stop")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    x, y = two_moons(args.points, 0.1, 0, dtype)
    sizes = [2, 16, 16, 1]
    mean_field = train_mean_field(
        sizes, Activation.RELU, x, y, PretrainConfig(epochs=1, mean_epochs=1), seed=0
    )
    network = point_network(mean_field, sizes, Activation.RELU)
    potential, layout = bernoulli_potential(network, x, y)
    start = layout.flatten(network)
    if args.export:
        export(args, x, y, potential, layout, start)
        return
    rows = []
    for name in args.compilations.split(","):
        config = NUTSConfig(
            warmup=args.warmup,
            samples=args.samples,
            max_tree_depth=args.max_tree_depth,
            compilation=Compilation(name),
            seed=1,
        )
        began = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch.compile's own deprecation notices
                result = run_nuts(potential, start, config)
        except RuntimeError as error:  # e.g. tracing through functional_call is refused
            rows.append({"candidate": f"pyro-nuts/{name}", "error": str(error).splitlines()[0]})
            print(rows[-1], flush=True)
            continue
        wall = time.perf_counter() - began
        d = result.diagnostics
        rows.append(
            {
                "candidate": f"pyro-nuts/{name}",
                "wall_seconds": wall,
                "samples_per_second": args.samples / wall,
                "ess_log_density_per_second": d["ess_log_density"] / wall,
                "ess_median_per_second": d["ess_median"] / wall,
                "leapfrog_steps_per_sample": d["leapfrog_steps_mean"],
                "ms_per_leapfrog_step": 1000 * wall / d["leapfrog_steps_total"],
                "accept_probability": d["accept_probability"],
                "divergences": d["divergences"],
                "rhat_log_density": d["rhat_log_density"],
            }
        )
        print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"arguments": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
