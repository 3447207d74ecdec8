"""``vbnn compare`` on three networks: every entry's test NLL, accuracy, ECE, OOD AUROC of the
predictive entropy and of the mutual information, and training seconds, over 3 seeds.

    VBNN_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python benchmarks/compare_networks.py \\
        --out benchmarks/results/compare_networks
    python benchmarks/compare_networks.py --out benchmarks/results/compare_networks --report

Cases (seeded subsets as in ``examples/compare_cnn.py``: 3,000 training images, 1,000 test
images, 1,000 out-of-distribution images):

* ``cnn-5`` / ``cnn-20``: the small CNN of ``examples/compare_cnn.py`` (two 5x5 convolutions,
  dropout 0.5, dense 256-64-10) on Fashion-MNIST, MNIST as OOD, at its 5 epochs and at 4x that;
* ``resnet``: the residual CNN of ``converted_step.py`` (``resblock``: the time-to-quality
  benchmark's ``resnet``) on Fashion-MNIST, MNIST as OOD, 5 epochs;
* ``mlp``: the MLP 784-400-400-10 of ``converted_step.py`` on MNIST, Fashion-MNIST as OOD,
  5 epochs.

Entries: ``mf`` (Adam on the ELBO), ``ivon`` (``vbnn.IVON``), ``ivon-ensemble``, ``point``,
``ensemble`` (5 members), ``laplace`` (last-layer KFAC, marginal-likelihood prior precision;
needs the extra ``laplace``) and, on the CNN, which has a dropout layer, ``mc-dropout`` (the MLP
and the residual CNN have none). Every entry at ``vbnn.compare``'s defaults but the Adam step,
3e-3 as in the example. Each case's runs go to ``OUT/<case>.sqlite`` as they finish: a re-run
trains only what is missing, and ``OUT/table.md`` is written from what is stored (``--report``:
only the cases already started). ``--quick`` (300 / 100 / 100 images, 1 epoch) is a smoke run.

The goals it checks (medians over seeds): one variational entry within 0.01 nats of the deep
ensemble's test NLL at <= 1/3 of its training seconds with OOD AUROC (MI) >= 0.85, and
``ivon-ensemble`` ahead of the deep ensemble on NLL and OOD AUROC (MI).
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from converted_step import network
from torch import nn

import vbnn
from vbnn.data.mnist import load_images
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "compare_cnn.py"
ENTRIES = ("mf", "ivon", "ivon-ensemble", "point", "ensemble", "laplace")
VARIATIONAL = ("mf", "ivon")
LEARNING_RATE = 3e-3
SIZES = {"train": 3000, "test": 1000, "ood": 1000}
QUICK_SIZES = {"train": 300, "test": 100, "ood": 100}


def example_cnn() -> nn.Module:
    """The small CNN of ``examples/compare_cnn.py``, loaded from the example itself."""
    spec = importlib.util.spec_from_file_location("compare_cnn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.small_cnn()


@dataclass(frozen=True)
class Case:
    """One network on one data set with its OOD set, trained ``epochs`` epochs."""

    build: Callable[[], nn.Module]
    data: str
    ood: str
    epochs: int
    dropout: bool = False


CASES = {
    "cnn-5": Case(example_cnn, "fashion-mnist", "mnist", 5, dropout=True),
    "cnn-20": Case(example_cnn, "fashion-mnist", "mnist", 20, dropout=True),
    "resnet": Case(lambda: network("resblock"), "fashion-mnist", "mnist", 5),
    "mlp": Case(lambda: network("mlp"), "mnist", "fashion-mnist", 5),
}


def subset(x: torch.Tensor, y: torch.Tensor, count: int, seed: int):
    """``count`` examples drawn without replacement (seeded), as in the example."""
    rows = torch.as_tensor(np.random.default_rng(seed).permutation(len(y))[:count])
    return x[rows], y[rows]


def run_case(name: str, out: Path, seeds: int, entries: tuple[str, ...], quick: bool = False
             ) -> pd.DataFrame:  # fmt: skip
    """Compare the case's entries (resumable through ``OUT/<name>.sqlite``): the fold frame."""
    case = CASES[name]
    sizes = QUICK_SIZES if quick else SIZES
    train = subset(*load_images(case.data, "train"), sizes["train"], 0)
    test = subset(*load_images(case.data, "test"), sizes["test"], 1)
    ood, _ = subset(*load_images(case.ood, "test"), sizes["ood"], 2)
    chosen = [e for e in entries if e != "mc-dropout" or case.dropout]
    result = vbnn.compare(case.build, train, test=test, ood=ood, families=chosen, seeds=seeds,
                          epochs=1 if quick else case.epochs, learning_rate=LEARNING_RATE,
                          database=out / f"{name}.sqlite", progress=True)  # fmt: skip
    return result.folds.assign(case=name)


COLUMNS = {
    "log_likelihood": "test NLL",
    "accuracy": "accuracy",
    "ece": "ECE",
    "entropy AUROC": "AUROC (entropy)",
    "mutual_information AUROC": "AUROC (MI)",
    "seconds": "train s",
}


def medians(folds: pd.DataFrame) -> pd.DataFrame:
    """Per (case, entry): the median over seeds of every column (NLL = -LL)."""
    frame = folds.assign(log_likelihood=-folds["log_likelihood"])
    table = frame.groupby(["case", "family"])[list(COLUMNS)].median()
    table["seeds"] = frame.groupby(["case", "family"]).size()
    return table.rename(columns=COLUMNS)


def goals(table: pd.DataFrame, case: str) -> list[str]:
    """The two goals of the module docstring on one case, as sentences with the numbers."""
    rows = table.loc[case]
    if "ensemble" not in rows.index:
        return [f"{case}: no deep ensemble stored"]
    ensemble = rows.loc["ensemble"]
    lines = []
    for entry in (e for e in VARIATIONAL if e in rows.index):
        row = rows.loc[entry]
        gap = row["test NLL"] - ensemble["test NLL"]
        share = row["train s"] / ensemble["train s"]
        met = gap <= 0.01 and share <= 1 / 3 and row["AUROC (MI)"] >= 0.85
        lines.append(f"{case}: {entry} NLL {gap:+.3f} nats from the ensemble's at "
                     f"{share:.2f}x its seconds, AUROC (MI) {row['AUROC (MI)']:.3f}: "
                     f"{'met' if met else 'not met'}")  # fmt: skip
    if "ivon-ensemble" in rows.index:
        row = rows.loc["ivon-ensemble"]
        ahead = (row["test NLL"] < ensemble["test NLL"]
                 and row["AUROC (MI)"] > ensemble["AUROC (MI)"])  # fmt: skip
        verdict = "ahead" if ahead else "not ahead"
        lines.append(f"{case}: ivon-ensemble NLL {row['test NLL']:.3f} vs "
                     f"{ensemble['test NLL']:.3f}, AUROC (MI) {row['AUROC (MI)']:.3f} vs "
                     f"{ensemble['AUROC (MI)']:.3f}: {verdict}")  # fmt: skip
    return lines


def report(frames: list[pd.DataFrame], out: Path) -> str:
    """The table of medians and the goals' sentences, written to ``OUT/table.md``."""
    table = medians(pd.concat(frames, ignore_index=True))
    text = markdown_table(table, index=True) + "\n\n"
    text += "\n".join(f"- {line}" for case in table.index.levels[0] for line in goals(table, case))
    write_atomic(out / "table.md", text + "\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("compare-networks"))
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--entries", nargs="+", default=[*ENTRIES, "mc-dropout"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--report", action="store_true", help="only the cases already started")
    parser.add_argument("--quick", action="store_true", help="300 / 100 / 100 images, 1 epoch")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    frames = []
    for name in args.cases:
        if args.report and not (args.out / f"{name}.sqlite").exists():
            continue
        frames.append(run_case(name, args.out, args.seeds, tuple(args.entries), args.quick))
    print(report(frames, args.out))


if __name__ == "__main__":
    main()
