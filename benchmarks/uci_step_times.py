"""Seconds per training step of UCI runs, to estimate a full reproduction's compute.

For each (data set, method, depth) it trains the given splits (batched as the engine chunks them)
for ``--short`` and ``--long`` iterations, after a 2-iteration warm-up, and prints, as JSON lines,
the time per step (t_long - t_short) / (long - short) and the fixed part (data, evaluation with
100 samples):

    python benchmarks/uci_step_times.py --datasets kin8nm,naval,protein --methods mf --splits 0
    python benchmarks/uci_step_times.py --datasets boston --methods mf,gd --depths 1,2,3

A full run's training then costs about ``runs x (fixed + iterations x step)``; Optuna's candidates
add ``trials`` runs on 80% of the rows per (data set, method, depth).
"""

from __future__ import annotations

import argparse
import json
import time

from vbnn.data import load_uci
from vbnn.data.splits import parse_splits
from vbnn.regression.engine import run_splits
from vbnn.regression.methods import method_config
from vbnn.regression.runs import TrainConfig
from vbnn_lab.overpruning.extension import hidden_width


def seconds(dataset, config: TrainConfig, splits: list[int]) -> float:
    start = time.perf_counter()
    run_splits(dataset, splits, config)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="boston")
    parser.add_argument("--methods", default="mf")
    parser.add_argument("--depths", default="1")
    parser.add_argument("--splits", default="0")
    parser.add_argument("--short", type=int, default=50)
    parser.add_argument("--long", type=int, default=150)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    splits = list(parse_splits(args.splits) or [0])
    for name in args.datasets.split(","):
        dataset = load_uci(name, args.data_dir)
        for depth in (int(d) for d in args.depths.split(",")):
            for method in args.methods.split(","):
                hidden = (hidden_width(name),) * depth
                # a first call pays one-off costs (imports, allocator); keep them out of the slope
                seconds(dataset, method_config(method, hidden=hidden, iterations=2), splits)
                times = {
                    n: seconds(dataset, method_config(method, hidden=hidden, iterations=n),
                               splits)
                    for n in (args.short, args.long)
                }  # fmt: skip
                step = (times[args.long] - times[args.short]) / (args.long - args.short)
                fixed = times[args.short] - args.short * step
                print(json.dumps({"dataset": name, "method": method, "hidden": list(hidden),
                                  "splits": len(splits), "seconds_per_step": round(step, 5),
                                  "fixed_seconds": round(fixed, 2)}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
