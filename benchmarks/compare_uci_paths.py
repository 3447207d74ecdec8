"""Boston: vbnn.compare's table path (before vs after) and the new network path, same splits.

Usage (OMP_NUM_THREADS=1, VBNN_DATA_DIR=../shared/data; BEFORE: a checkout of the code before):

    PYTHONPATH=BEFORE/src python benchmarks/compare_uci_paths.py table --out base_table.csv
    PYTHONPATH=src python benchmarks/compare_uci_paths.py table --out main_table.csv
    PYTHONPATH=src python benchmarks/compare_uci_paths.py network --out network_mb.csv \
        --epochs 500 --batch-size 128 --learning-rate 0.001
    PYTHONPATH=src python benchmarks/compare_uci_paths.py network --out network_fb.csv \
        --epochs 2000 --batch-size 0 --learning-rate 0.005
    python benchmarks/compare_uci_paths.py summarise base_table.csv main_table.csv network_*.csv

table:   vbnn.compare("boston", splits=<first S standard splits>, families=..., tune=False,
         iterations=I, test_samples=100, seed=0): the engine (tanh MLP, hidden (50,), full-batch
         Adam, inputs and target standardised per split by the training rows, LL and RMSE in
         original units, boston presets for prior_std).
network: per split, x and y standardised by the training rows' mean and std (np.std, ddof 0,
         as the engine), vbnn.compare(mlp, (x_train, y_train), test=(x_test, y_test), ...) on
         nn.Sequential(Linear(13, 50), Tanh(), Linear(50, 1)); its per-split LL is in
         standardised units, shifted by -log(y_std) and RMSE multiplied by y_std here to give
         original units (the table path's units).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd
import torch
from torch import nn

import vbnn
from vbnn.data import load_uci

HIDDEN = 50


def mlp() -> nn.Module:
    """The table path's network: one tanh hidden layer of 50 units, one output."""
    return nn.Sequential(nn.Linear(13, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mean, std = train.mean(0), train.std(0)
    std = np.where(std > 0, std, 1.0)
    return (train - mean) / std, (test - mean) / std, std


def table(args: argparse.Namespace) -> pd.DataFrame:
    dataset = load_uci("boston")
    splits = dataset.splits[: args.splits]
    start = time.perf_counter()
    result = vbnn.compare(
        "boston",
        splits=splits,
        families=args.families.split(","),
        tune=False,
        iterations=args.iterations,
        test_samples=100,
        seed=0,
    )
    wall = time.perf_counter() - start
    print(f"{vbnn.__file__}: wall {wall:.1f} s")
    print(result.table)
    print(result.verdict)
    frame = result.folds.copy()
    frame["path"] = "table"
    frame["wall"] = wall
    return frame


def network(args: argparse.Namespace) -> pd.DataFrame:
    dataset = load_uci("boston")
    rows = []
    start = time.perf_counter()
    for k, (train, test) in enumerate(dataset.splits[: args.splits]):
        x_train, x_test, _ = standardise(dataset.inputs[train], dataset.inputs[test])
        y_train, y_test, y_std = standardise(dataset.target[train], dataset.target[test])
        result = vbnn.compare(
            mlp,
            (x_train.astype(np.float32), y_train.astype(np.float32)),
            test=(x_test.astype(np.float32), y_test.astype(np.float32)),
            families=args.families.split(","),
            epochs=args.epochs,
            batch_size=args.batch_size or None,
            learning_rate=args.learning_rate,
            test_samples=100,
            seed=0,
        )
        folds = result.folds.copy()
        folds["fold"] = k
        folds["log_likelihood_std_units"] = folds["log_likelihood"]
        folds["log_likelihood"] = folds["log_likelihood"] - math.log(float(y_std))
        folds["rmse"] = folds["rmse"] * float(y_std)
        rows.append(folds)
        shown = folds[["family", "log_likelihood", "rmse", "seconds"]].to_dict("records")
        print(f"split {k}: {shown}")
    wall = time.perf_counter() - start
    frame = pd.concat(rows, ignore_index=True)
    frame["path"] = f"network e{args.epochs} b{args.batch_size or 'full'} lr{args.learning_rate}"
    frame["wall"] = wall
    print(f"{vbnn.__file__}: wall {wall:.1f} s")
    return frame


def _markdown(frame: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += [
        "| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join(lines)


def _mean_sem(values: np.ndarray) -> str:
    sem = values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{values.mean():.3f} +- {sem:.3f}"


def summarise(paths: list[str]) -> None:
    """Mean +- SEM over splits per (file, family); then, against the first file (the table
    path), the paired per-split test-LL and RMSE gaps of every network file's entries."""
    frames = {path: pd.read_csv(path) for path in paths}
    for path, frame in frames.items():
        print(f"\n{path}  ({frame['path'].iloc[0]}, wall {frame['wall'].iloc[0]:.1f} s)\n")
        out = []
        for family, group in frame.groupby("family", sort=False):
            cells = {"family": family, "splits": len(group)}
            for metric in ("log_likelihood", "rmse", "coverage", "seconds"):
                cells[metric] = _mean_sem(group[metric].to_numpy(float))
            out.append(cells)
        print(_markdown(pd.DataFrame(out)))
    reference = frames[paths[0]]
    out = []
    for _path, frame in list(frames.items())[1:]:
        if frame["path"].iloc[0] == "table":
            continue
        for entry in frame["family"].unique():
            for family in reference["family"].unique():
                a = frame[frame.family == entry].sort_values("fold")
                b = reference[reference.family == family].sort_values("fold")
                if len(a) != len(b):
                    continue
                out.append({
                    "network run": frame["path"].iloc[0], "network entry": entry,
                    "table family": family,
                    "test LL gap (network - table)": _mean_sem(
                        a.log_likelihood.to_numpy() - b.log_likelihood.to_numpy()),
                    "RMSE gap": _mean_sem(a.rmse.to_numpy() - b.rmse.to_numpy()),
                })  # fmt: skip
    if out:
        print(f"\npaired per-split gaps to {paths[0]}\n")
        print(_markdown(pd.DataFrame(out)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["table", "network", "summarise"])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--out")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--families")
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.mode == "summarise":
        summarise(args.files)
        return
    if args.mode == "table":
        args.families = args.families or "mf,map,es"
        frame = table(args)
    else:
        args.families = args.families or "mf,point"
        frame = network(args)
    frame.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
