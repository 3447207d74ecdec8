"""Per-unit cost of the full depth experiment (NumPyro NUTS, 4 chains), from short runs.

For each depth (ReLU; the activation hardly changes the cost) at the full protocol's data size
(10,000 two-moons points, float32; ``--points``): pre-training time (10 + 10 epochs); the time
of one gradient of the JAX potential (jit-compiled, mean of 200 calls); and a short NumPyro run of
the unit's chains (``--warmup`` + ``--samples`` per chain, tree depth <= 10) for the leapfrog
steps per iteration after adaptation. A full unit (4 chains x (1000 + 1000) iterations) then
costs about

    pre-training + 4 x 2000 x steps-per-iteration x time-per-gradient (+ compilation),

which the short run's own wall time checks (its prediction is printed beside it). With
``--samples 0`` the short run is skipped and every iteration is assumed to hit the tree-depth cap
(2^10 - 1 = 1023 steps), as the quick runs and issue 5's runs nearly all did: an upper bound.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/depth_budget.py [--depths 1,3,5]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.references.architecture import MLPArchitecture
from vbnn.references.jax_nuts import ChainsConfig, jittered_starts, run_chains
from vbnn.references.jax_potential import jax_potential
from vbnn_lab.depth.models import (
    PretrainConfig,
    depth_widths,
    point_network,
    train_mean_field,
)
from vbnn_lab.depth.units import two_moons


def gradient_seconds(potential, start: np.ndarray, calls: int = 200) -> float:
    """Mean wall time of one jit-compiled value-and-gradient of ``potential`` at ``start``."""
    gradient = jax.jit(jax.value_and_grad(potential))
    jax.block_until_ready(gradient(start))  # compile
    began = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(gradient(start))
    return (time.perf_counter() - began) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="1,2,3,4,5")
    parser.add_argument("--points", type=int, default=10_000, help="two-moons training points")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--samples", type=int, default=50, help="0: assume the tree-depth cap")
    parser.add_argument("--full-iterations", type=int, default=2000, help="warm-up + samples")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--max-tree-depth", type=int, default=10)
    args = parser.parse_args()
    x, y = two_moons(args.points, 0.1, 0, torch.float32)
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        architecture = MLPArchitecture(tuple(depth_widths(depth)), Activation.RELU)
        began = time.perf_counter()
        mean_field = train_mean_field(architecture, x, y, PretrainConfig(), seed=0)
        train_seconds = time.perf_counter() - began
        network = point_network(mean_field, architecture)
        start = torch.cat([p.detach().reshape(-1) for p in network.parameters()]).numpy()
        potential = jax_potential(architecture, x.numpy(), y.numpy())
        per_gradient = gradient_seconds(potential, start)
        steps, cap_hits, short_seconds = 2.0**args.max_tree_depth - 1, 1.0, float("nan")
        if args.samples:
            config = ChainsConfig(
                chains=args.chains, warmup=args.warmup, samples=args.samples,
                max_tree_depth=args.max_tree_depth,
            )  # fmt: skip
            began = time.perf_counter()
            result = run_chains(potential, jittered_starts(start, config), config)
            short_seconds = time.perf_counter() - began
            steps = result.diagnostics["leapfrog_steps_mean"]
            cap_hits = result.diagnostics["max_tree_depth_hit_fraction"]
        short_iterations = args.chains * (args.warmup + args.samples)
        full_nuts = args.chains * args.full_iterations * steps * per_gradient
        rows.append(
            {
                "depth": depth,
                "width": architecture.sizes[1],
                "pretrain_s": train_seconds,
                "ms_per_gradient": 1000 * per_gradient,
                "steps_per_iteration": steps,
                "tree_cap_hits": cap_hits,
                "short_run_s": short_seconds,
                "short_run_predicted_s": (
                    short_iterations * steps * per_gradient if args.samples else float("nan")
                ),
                "full_unit_estimate_s": train_seconds + full_nuts,
            }
        )
        print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    per_repeat = 4 * table["full_unit_estimate_s"].sum()  # relu, 2 leaky slopes, identity
    print(f"one repeat of 4 activations x {len(table)} depths: {per_repeat / 3600:.2f} h, 1 core")


if __name__ == "__main__":
    main()
