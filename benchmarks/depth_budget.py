"""Per-configuration cost of the full depth experiment, measured on short NUTS runs.

For each depth (ReLU; the activation does not change the cost) at the full protocol's data size
(10,000 two-moons points, float32): pre-training time (10 + 10 epochs), and the wall time per
leapfrog step of a short NUTS run from the pre-trained means. The full unit's NUTS cost is then
(warm-up + samples) x steps-per-iteration x time-per-step, with steps-per-iteration taken at the
tree-depth cap (2^7 - 1 = 127), which the quick and short runs hit on 90-100% of iterations.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/depth_budget.py [--iterations 30]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.experiments.depth.models import (
    PretrainConfig,
    bernoulli_potential,
    depth_widths,
    point_network,
    train_mean_field,
)
from vbnn.experiments.depth.units import two_moons
from vbnn.references.nuts import NUTSConfig, run_nuts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30, help="short NUTS run length")
    parser.add_argument("--depths", default="1,2,3,4,5")
    args = parser.parse_args()
    x, y = two_moons(10_000, 0.1, 0, torch.float32)
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        sizes = depth_widths(depth)
        began = time.perf_counter()
        mean_field = train_mean_field(sizes, Activation.RELU, x, y, PretrainConfig(), seed=0)
        train_seconds = time.perf_counter() - began
        network = point_network(mean_field, sizes, Activation.RELU)
        potential, layout = bernoulli_potential(network, x, y)
        config = NUTSConfig(warmup=args.iterations // 2, samples=args.iterations, seed=1)
        result = run_nuts(potential, layout.flatten(network), config)
        steps = result.diagnostics["leapfrog_steps_total"]
        per_step = result.diagnostics["seconds"] / steps
        full_nuts = 1100 * 127 * per_step
        rows.append(
            {
                "depth": depth,
                "width": sizes[1],
                "pretrain_s": train_seconds,
                "ms_per_leapfrog_step": 1000 * per_step,
                "steps_per_iteration_short_run": steps / (config.warmup + config.samples),
                "full_unit_estimate_s": train_seconds + full_nuts,
            }
        )
        print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    per_repeat = 3 * table["full_unit_estimate_s"].sum()
    print(f"one repeat of 3 activations x {len(table)} depths: {per_repeat / 3600:.2f} h on 1 core")


if __name__ == "__main__":
    main()
