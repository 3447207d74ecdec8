"""Milliseconds per full-batch training step of one method on a stack of UCI splits.

VBNN_DATA_DIR=../shared/data python benchmarks/step_time.py power 1 mf 200
"""

from __future__ import annotations

import argparse
import time

from vbnn.core.randomness import ModelGenerators
from vbnn.core.runtime import keep_freed_memory
from vbnn.data import load_uci
from vbnn.data.splits import stack_splits
from vbnn.regression.full_batch import Problem, fit
from vbnn.regression.methods import method_config
from vbnn.regression.stack import build_stack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dataset")
    parser.add_argument("models", type=int, help="splits 0..models-1 stacked together")
    parser.add_argument("method")
    parser.add_argument("iterations", type=int)
    parser.add_argument("--glibc-defaults", action="store_true", help="skip keep_freed_memory")
    args = parser.parse_args()
    if not args.glibc_defaults:
        keep_freed_memory()
    keys = list(range(args.models))
    config = method_config(args.method, iterations=args.iterations)
    data = stack_splits(load_uci(args.dataset), keys)
    model, likelihood = build_stack(config, data.x_train.shape[-1], keys)
    generators = ModelGenerators.for_keys(config.seed, keys, "train")
    start = time.perf_counter()
    fit(config, Problem(model, likelihood, data.x_train, data.y_train), generators)
    per_step = (time.perf_counter() - start) / args.iterations * 1e3
    print(f"{args.dataset} M={args.models} {args.method}: {per_step:.2f} ms/step")


if __name__ == "__main__":
    main()
