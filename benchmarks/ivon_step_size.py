"""IVON's step size alpha (and h0 beside it) chosen on validation images of ``vbnn compare``'s
three networks, never on test images.

The cases of ``compare_networks.py`` (the CNN of ``examples/compare_cnn.py`` at 5 and 20
epochs and the residual CNN on Fashion-MNIST, the MLP 784-400-400-10 on MNIST), each on the same
seeded 3,000 training images as there: ``vbnn.IVON`` trains a mean-field copy on the first 2,700
and the other 300 score it (validation NLL and accuracy of the mean of 16 weight draws'
probabilities; ``ivon_hess_init.score``). One run per (case, alpha, h0, seed).

At h close to h0 IVON's step of the means is alpha (h0 + delta) / (h + delta) times the averaged
gradient, about alpha g: SGD with an averaged (not summed) momentum, i.e. plain SGD with momentum
at alpha (1 - beta1). Shen et al. 2024 chose alpha in 0.1 to 0.5 for runs of 100 and more epochs;
``vbnn compare`` trains 5 to 20 epochs of 3,000 images, a few hundred steps.

    VBNN_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python benchmarks/ivon_step_size.py \\
        --out benchmarks/results/ivon_step_size.jsonl
    python benchmarks/ivon_step_size.py --out benchmarks/results/ivon_step_size.jsonl --report

One JSON line per run is appended to ``--out`` (a re-run skips the runs already there);
``--report`` prints the medians over seeds per case and setting, and each setting's worst
regret (validation NLL above the case's best setting): the default step size is the one of
least worst regret at either h0 (``vbnn.core.defaults``, where h0 is chosen too).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from compare_networks import CASES, subset
from ivon_hess_init import median_std, score

import vbnn
from vbnn.data.mnist import load_images
from vbnn.stores.markdown import markdown_table

FIT, VALIDATION = 2700, 300


def stored(out: Path) -> list[dict]:
    """The rows of ``out`` (a torn last line of a killed run is skipped)."""
    rows = []
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def sweep(out: Path, grid: list[dict], run: Callable[..., dict]) -> None:
    """``run(**settings)`` for every settings of ``grid`` not yet in ``out``, each row appended
    as one whole line as soon as it is done (its settings are the row's first fields)."""
    keys = list(grid[0]) if grid else []
    done = [{k: row.get(k) for k in keys} for row in stored(out)]
    for settings in grid:
        if settings in done:
            continue
        row = run(**settings)
        with out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def run(case: str, learning_rate: float, hess_init: float, beta2: float,
        clip_radius: float, seed: int,
        training_mode: str | None = None) -> dict:  # fmt: skip
    """One IVON run of ``case`` scored on its validation images; ``training_mode`` None: the
    layers' estimators (the LRT on dense layers, one draw a minibatch on convolutions),
    "weights": one draw a minibatch on every layer."""
    spec = CASES[case]
    x, y = subset(*load_images(spec.data, "train"), FIT + VALIDATION, 0)
    torch.manual_seed(seed)
    options = {} if training_mode is None else {"training_mode": training_mode}
    network = vbnn.convert(spec.build(), "mf", **options)
    start = time.perf_counter()
    vbnn.train(network, (x[:FIT], y[:FIT]), epochs=spec.epochs, seed=seed, progress=False,
               optimizer=vbnn.IVON(learning_rate=learning_rate, hess_init=hess_init, beta2=beta2,
                                   clip_radius=clip_radius))  # fmt: skip
    seconds = time.perf_counter() - start
    nll, accuracy = score(network, x[FIT:], y[FIT:])
    return {"case": case, "learning_rate": learning_rate, "hess_init": hess_init, "beta2": beta2,
            "clip_radius": clip_radius, "seed": seed,
            "training_mode": training_mode, "validation_nll": nll, "accuracy": accuracy,
            "seconds": seconds, "median_std": median_std(network)}  # fmt: skip


def by_case(frame: pd.DataFrame, keys: list[str], reference: object, name: str) -> pd.DataFrame:
    """Validation NLL per setting (``keys``) and case, median over seeds; each setting's worst
    regret (the NLL above the case's best setting of the grid, at the setting's worst case); and
    its NLL against the ``reference`` setting's, paired by (case, seed): mean +- standard error,
    in the column ``paired vs <name>``."""
    wide = frame.groupby([*keys, "case"])["validation_nll"].median().unstack("case")
    wide["worst regret"] = (wide - wide.min()).max(axis=1)
    paired = frame.pivot_table("validation_nll", ["case", "seed"], keys)
    differences = paired.sub(paired[reference], axis=0)
    wide[f"paired vs {name}"] = [
        f"{d.mean():+.3f} +- {d.std() / np.sqrt(d.count()):.3f}" for d in
        (differences[setting].dropna() for setting in wide.index)
    ]  # fmt: skip
    return wide


def report(rows: list[dict]) -> str:
    """Medians over seeds per setting and case; each setting's worst regret over the cases and
    its NLL against the defaults' (``vbnn.IVON()``), paired by (case, seed)."""
    if not rows:
        return "no runs stored"
    frame = pd.DataFrame(rows)
    modes = frame.get("training_mode", pd.Series(None, index=frame.index, dtype=object))
    frame["training_mode"] = modes.astype(object).where(modes.notna(), "default")
    settings = ["learning_rate", "hess_init", "beta2", "clip_radius", "training_mode"]
    for key in settings[:-1]:  # as labels, in full (beta2 0.99999 is not 1.000)
        frame[key] = frame[key].map("{:g}".format)
    groups = frame.groupby(["case", *settings])[["validation_nll", "accuracy", "median_std"]]
    table = groups.median().assign(seeds=groups.size())
    defaults = vbnn.IVON()
    reference = (*(f"{getattr(defaults, key):g}" for key in settings[:-1]), "default")
    wide = by_case(frame, settings, reference, "defaults")
    return (markdown_table(table.round(4), index=True) + "\n\nValidation NLL by case:\n\n"
            + markdown_table(wide.round(3), index=True) + "\n")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ivon_step_size.jsonl"))
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--learning-rates", type=float, nargs="+",
                        default=[0.1, 0.2, 0.3, 0.5, 1.0, 3.0])  # fmt: skip
    parser.add_argument("--hess-inits", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--beta2s", type=float, nargs="+", default=[0.99999],
                        help="the averaging factors of the Hessian estimate")  # fmt: skip
    parser.add_argument("--clip-radii", type=float, nargs="+", default=[math.inf],
                        help="bounds of the preconditioned step (inf: none)")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--training-modes", nargs="+", choices=["default", "weights"],
                        default=["default"], help="the layers' estimators, or one draw a "
                        "minibatch on every layer")  # fmt: skip
    parser.add_argument("--report", action="store_true", help="only print the stored medians")
    args = parser.parse_args()
    if not args.report:
        modes = [None if mode == "default" else mode for mode in args.training_modes]
        grid = [{"case": case, "learning_rate": rate, "hess_init": hess_init, "beta2": beta2,
                 "clip_radius": radius, "seed": seed, "training_mode": mode}
                for seed in args.seeds for case in args.cases for rate in args.learning_rates
                for hess_init in args.hess_inits for beta2 in args.beta2s
                for radius in args.clip_radii for mode in modes]  # fmt: skip
        sweep(args.out, grid, run)
    print(report(stored(args.out)))


if __name__ == "__main__":
    main()
