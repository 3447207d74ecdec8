"""``vbnn.compare(..., shift="ovadia")``: accuracy, NLL, ECE and Brier under dataset shift.

    VBNN_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python benchmarks/compare_shift.py \\
        --out benchmarks/results/compare_shift

A LeNet-5-like CNN (5x5 convolutions of 20 and 50 channels, each followed by ReLU and 2x2 max
pooling, dense 800-500-10) on a seeded Fashion-MNIST subset (3,000 training and 1,000 test
images), the entries ``point``, ``ensemble`` (5 members), ``mf``, ``ivon``, ``swag`` and
``point+ts``, one seed, 5 epochs, Adam 3e-3 (IVON and SWAG at their own steps), 10 predictive
samples; every entry scored on Ovadia et al. 2019's shifts (``vbnn.data.shift.ovadia_shifts``:
rotations 0 to 180 degrees in steps of 15, six corruptions at intensities 0 to 5). The runs go
to ``OUT/compare.sqlite`` as they finish (a re-run trains only what is missing); ``OUT/shifts.csv``
holds every row, ``OUT/table.md`` the clean metrics and the means over the shifted copies,
``OUT/shift.png`` the figure. ``--quick`` (300 / 100 images, 1 epoch, 2 samples) is a smoke run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from torch import nn

import vbnn
from vbnn.data.mnist import load_images
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table

ENTRIES = ("point", "ensemble", "mf", "ivon", "swag", "point+ts")
METRICS = ("accuracy", "log_likelihood", "ece", "brier")
SIZES = {"train": 3000, "test": 1000}
QUICK_SIZES = {"train": 300, "test": 100}


def lenet() -> nn.Module:
    """LeNet-5-like: conv 5x5 20 - pool - conv 5x5 50 - pool - dense 500 - dense 10."""
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(20, 50, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10),
    )  # fmt: skip


def subset(split: str, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` seeded Fashion-MNIST images of ``split``: pixels in [0, 1]."""
    images, labels = load_images("fashion-mnist", split)
    rows = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))[:size]
    return images[rows], labels[rows]


def summary(shifts: pd.DataFrame) -> pd.DataFrame:
    """Per entry: the clean metrics (intensity 0), their means over the rotations by 15 to 180
    degrees and over the corruptions at intensities 1 to 5."""
    clean = shifts[shifts["intensity"] == 0].groupby("entry", sort=False)[list(METRICS)].mean()
    shifted = shifts[shifts["intensity"] > 0]
    rotated = shifted[shifted["shift"] == "rotation"]
    corrupted = shifted[shifted["shift"] != "rotation"]
    parts = {"clean": clean}
    for name, rows in (("rotated", rotated), ("corrupted", corrupted)):
        parts[name] = rows.groupby("entry", sort=False)[list(METRICS)].mean()
    frame = pd.concat(parts, axis=1)
    frame.columns = [f"{metric} ({part})" for part, metric in frame.columns]
    return frame.loc[list(dict.fromkeys(shifts["entry"]))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/compare_shift"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--entries", nargs="+", default=list(ENTRIES))
    arguments = parser.parse_args()
    sizes = QUICK_SIZES if arguments.quick else SIZES
    arguments.out.mkdir(parents=True, exist_ok=True)
    result = vbnn.compare(
        lenet,
        subset("train", sizes["train"], 0),
        test=subset("test", sizes["test"], 1),
        families=arguments.entries,
        shift="ovadia",
        epochs=1 if arguments.quick else 5,
        test_samples=2 if arguments.quick else 10,
        learning_rate=3e-3,
        database=arguments.out / "compare.sqlite",
        progress=True,
    )
    write_atomic(arguments.out / "shifts.csv", result.shifts.to_csv(index=False))
    table = summary(result.shifts).round(4)
    write_atomic(arguments.out / "table.md", markdown_table(table, index=True) + "\n")
    result.plot_shift(arguments.out / "shift.png")
    print(result.to_markdown())
    print(markdown_table(table, index=True))


if __name__ == "__main__":
    main()
