"""The initial posterior std of ``mf`` trained by Adam on the ELBO, chosen on validation images of
``vbnn compare``'s networks, never on test images.

The cases and data of ``ivon_step_size.py`` (``compare_networks.py``'s four, 2,700 of the
seeded 3,000 training images trained on, the other 300 scoring): ``vbnn.convert(network, "mf",
init_std=s)`` trained by ``vbnn.train`` at ``compare_networks.py``'s Adam step (3e-3) and the
case's epochs, scored by the validation NLL and accuracy of the mean of 16 weight draws'
probabilities, beside the median posterior std after training and the mean mutual information
of the 300 validation images (a number for the posterior's width, not a choice criterion). One
run per (case, s, seed).

Adam moves a log std by about one learning rate a step, so in compare's 110 to 440 steps every
std stays within a factor of about 1.4 to 4 of its start: the initial std is the posterior's
width for the whole of a short run (``vbnn.core.defaults``: ``INIT_STD``).

    VBNN_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python benchmarks/mf_init_std.py \\
        --out benchmarks/results/mf_init_std.jsonl
    python benchmarks/mf_init_std.py --out benchmarks/results/mf_init_std.jsonl --report

One JSON line per run is appended to ``--out`` (a re-run skips the runs already there).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch
from compare_networks import CASES, LEARNING_RATE, subset
from ivon_hess_init import draws, median_std
from ivon_step_size import FIT, VALIDATION, by_case, stored, sweep

import vbnn
from vbnn.data.mnist import load_images
from vbnn.stores.markdown import markdown_table


def validation_scores(network: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
                      ) -> tuple[float, float, float]:  # fmt: skip
    """(NLL, accuracy, mean mutual information) of ``ivon_hess_init.draws``' probabilities."""
    probabilities = draws(network, x)
    mean = probabilities.mean(0)
    nll = -mean[torch.arange(len(y)), y].clamp_min(1e-12).log().mean()
    entropy = -(mean * mean.clamp_min(1e-12).log()).sum(-1)
    expected = -(probabilities * probabilities.clamp_min(1e-12).log()).sum(-1).mean(0)
    accuracy = (mean.argmax(-1) == y).float().mean()
    return float(nll), float(accuracy), float((entropy - expected).mean())


def run(case: str, init_std: float, seed: int) -> dict:
    """One Adam run of ``case``'s ``mf`` conversion from ``init_std``, on its validation images."""
    spec = CASES[case]
    x, y = subset(*load_images(spec.data, "train"), FIT + VALIDATION, 0)
    torch.manual_seed(seed)
    network = vbnn.convert(spec.build(), "mf", init_std=init_std)
    start = time.perf_counter()
    vbnn.train(network, (x[:FIT], y[:FIT]), epochs=spec.epochs, learning_rate=LEARNING_RATE,
               seed=seed, progress=False)  # fmt: skip
    seconds = time.perf_counter() - start
    nll, accuracy, information = validation_scores(network, x[FIT:], y[FIT:])
    return {"case": case, "init_std": init_std, "seed": seed, "validation_nll": nll,
            "accuracy": accuracy, "mutual_information": information, "seconds": seconds,
            "median_std": median_std(network)}  # fmt: skip


def report(rows: list[dict], reference: float = 1e-4) -> str:
    """Medians over seeds per (case, s); each s's worst regret over the cases; and each s's
    validation NLL against ``reference``'s, paired by (case, seed): mean and standard error."""
    frame = pd.DataFrame(rows).assign(init_std=lambda f: f["init_std"].map("{:g}".format))
    keys = ["case", "init_std"]
    table = frame.groupby(keys)[["validation_nll", "accuracy"]].median().round(3)
    for column in ("mutual_information", "median_std"):
        table[column] = frame.groupby(keys)[column].median().map("{:.2g}".format)
    table["seeds"] = frame.groupby(keys).size()
    wide = by_case(frame, ["init_std"], f"{reference:g}", f"{reference:g}")
    return (markdown_table(table, index=True) + "\n\nValidation NLL by case:\n\n"
            + markdown_table(wide.round(3), index=True) + "\n")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("mf_init_std.jsonl"))
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--init-stds", type=float, nargs="+",
                        default=[1e-4, 1e-3, 3e-3, 0.01, 0.03])  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--report", action="store_true", help="only print the stored medians")
    args = parser.parse_args()
    if not args.report:
        grid = [{"case": case, "init_std": init_std, "seed": seed} for seed in args.seeds
                for case in args.cases for init_std in args.init_stds]  # fmt: skip
        sweep(args.out, grid, run)
    print(report(stored(args.out)))


if __name__ == "__main__":
    main()
