"""Which posterior for a small CNN? ``vbnn.compare`` on Fashion-MNIST, MNIST as out-of-distribution.

Three families (mf, gd, vd-layer) against maximum likelihood (point), a deep ensemble and MC
dropout, all from the same small CNN with one dropout layer, on a seeded subset of Fashion-MNIST
(3,000 training and 1,000 test images by default), with 1,000 MNIST test images as
out-of-distribution inputs; 2 seeds. Needs the IDX files under ``$VBNN_DATA_DIR/fashion-mnist``
and ``$VBNN_DATA_DIR/mnist`` (see ``vbnn.data.mnist``)::

    python examples/compare_cnn.py --out compare-cnn
    python examples/compare_cnn.py --train 300 --test 100 --ood 100 --epochs 1   # a quick look

The runs go to ``OUT/results.sqlite``: the same command again trains nothing and prints the same
table; the figure goes to ``OUT/compare.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

import vbnn
from vbnn.data.mnist import load_images


def small_cnn() -> nn.Module:
    """Two 5x5 convolutions with max pooling, dropout and two dense layers: 28x28 -> 10 logits."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(16 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def subset(x: torch.Tensor, y: torch.Tensor, count: int, seed: int):
    """``count`` examples drawn without replacement (seeded)."""
    rows = torch.as_tensor(np.random.default_rng(seed).permutation(len(y))[:count])
    return x[rows], y[rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=3000, help="Fashion-MNIST training images")
    parser.add_argument("--test", type=int, default=1000, help="Fashion-MNIST test images")
    parser.add_argument("--ood", type=int, default=1000, help="MNIST test images (OOD)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="Adam step")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--families", default="mf,gd,vd-layer,point,ensemble,mc-dropout", help="comma list"
    )
    parser.add_argument("--data-dir", default=None, help="overrides $VBNN_DATA_DIR")
    parser.add_argument("--out", type=Path, default=Path("compare-cnn"))
    args = parser.parse_args()
    start = time.perf_counter()
    train = subset(*load_images("fashion-mnist", "train", args.data_dir), args.train, 0)
    test = subset(*load_images("fashion-mnist", "test", args.data_dir), args.test, 1)
    ood, _ = subset(*load_images("mnist", "test", args.data_dir), args.ood, 2)
    args.out.mkdir(parents=True, exist_ok=True)
    result = vbnn.compare(
        small_cnn,
        train,
        test=test,
        ood=ood,
        families=args.families.split(","),
        seeds=args.seeds,
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        database=args.out / "results.sqlite",
        progress=True,
    )
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(result.table.to_string())
    print(f"verdict (test log-likelihood, paired over seeds): {result.verdict}")
    result.plot(args.out / "compare.png")
    (args.out / "compare.md").write_text(result.to_markdown())
    print(f"wall time {time.perf_counter() - start:.1f} s; figure {args.out / 'compare.png'}")


if __name__ == "__main__":
    main()
