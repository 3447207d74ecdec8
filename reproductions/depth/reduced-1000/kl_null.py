"""The KL estimator's floor for every unit whose NUTS samples are on disk: ``kl_null.csv``.

Writes ``kl_null.csv`` and ``kl_null.png``. KL(q_diag || q_full) is computed from the
empirical covariance of 1200 pooled draws in about 1000 dimensions, so sampling noise alone
gives it a large value. For each unit this computes
two floors, what the same estimator reports with no correlation between parameters at all:
``kl_null_iid`` for as many independent draws with the unit's marginal variances
(``kl_closest_diagonal_null``), and ``kl_null_chains`` for the unit's own chains with every
parameter's chains reordered and circularly shifted on their own
(``kl_closest_diagonal_chain_null``: it keeps the autocorrelation, which makes the draws worth
fewer independent ones). ``kl_excess`` is the KL above the chain floor. Where a parameter's
autocorrelation time is longer than the chains (chains that do not mix), the shift cannot
decouple it and the floor is too low.

Run from the repository root after the run (the samples are not committed):
``python reproductions/depth/reduced-1000/kl_null.py results/depth-reduced`` (``--units`` for
another folder of unit records, such as ``tree-depth-10/units``). Units whose
samples are elsewhere (those sampled on another machine) are left out and counted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from vbnn.references.chain_diagnostics import ConvergenceCriterion
from vbnn.references.gaussian_gap import (
    empirical_covariance,
    kl_closest_diagonal,
    kl_closest_diagonal_chain_null,
    kl_closest_diagonal_null,
)
from vbnn_lab.depth.units import sampler_diagnostics

HERE = Path(__file__).parent


def unit_row(unit: Path, samples_dir: Path) -> dict | None:
    """One unit's KL, its floor and the excess; None when its samples are not in ``samples_dir``."""
    record = json.loads(unit.read_text())
    info, settings = record["info"], record["info"]["settings"]
    arrays = samples_dir / f"{unit.stem}.npz"
    if not arrays.exists():
        return None
    samples = np.load(arrays)["samples"]
    pooled = samples.reshape(-1, samples.shape[-1]).astype(np.float64)
    kl = kl_closest_diagonal(empirical_covariance(pooled, settings["jitter"])[1])
    if not np.isclose(kl, info["kl_diag_full"], rtol=1e-6):
        raise ValueError(f"{unit}: stored KL {info['kl_diag_full']} but the samples give {kl}")
    seed = settings["repeat"]
    iid = kl_closest_diagonal_null(pooled.var(0, ddof=1), len(pooled), settings["jitter"], seed)
    floor = kl_closest_diagonal_chain_null(samples, settings["jitter"], seed)
    return {
        "activation": info["activation"],
        "depth": info["depth"],
        "repeat": info["repeat"],
        "parameters": pooled.shape[1],
        "draws": len(pooled),
        "kl_diag_full": kl,
        "kl_null_iid": iid,
        "kl_null_chains": floor,
        "kl_excess": kl - floor,
        "trusted": ConvergenceCriterion().passes(sampler_diagnostics(info)),
        "unit": unit.stem,
    }


def plot(frame: pd.DataFrame, path: Path) -> None:
    """KL with both floors, and the excess over the chain floor, against depth (mean and SEM
    over the units with samples); hollow points have an untrusted unit, and depths where no unit
    is trusted are shaded."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(1, 2, figsize=(11, 4.4))
    for index, (activation, rows) in enumerate(frame.groupby("activation")):
        grouped = rows.groupby("depth")
        depth = grouped.size().index.to_numpy()
        failed = ~grouped["trusted"].all().to_numpy()
        for axis, column in zip(axes, ("kl_diag_full", "kl_excess"), strict=True):
            mean = grouped[column].mean().to_numpy()
            line = axis.errorbar(
                depth, mean, grouped[column].sem().fillna(0), marker="o", capsize=3,
                label=activation,
            )  # fmt: skip
            color = line[0].get_color()
            axis.scatter(depth[failed], mean[failed], s=30, zorder=5, facecolors="white",
                         edgecolors=color)  # fmt: skip
        floors = grouped[["kl_null_chains", "kl_null_iid"]].mean()
        axes[0].plot(depth, floors["kl_null_chains"], "--", color=color,
                     label="chain floor" if index == 0 else None)  # fmt: skip
        axes[0].plot(depth, floors["kl_null_iid"], ":", color=color,
                     label="independent-draw floor" if index == 0 else None)  # fmt: skip
    untrusted = frame.groupby("depth")["trusted"].any()
    for axis in axes:
        for depth in untrusted[~untrusted].index:
            axis.axvspan(depth - 0.5, depth + 0.5, color="grey", alpha=0.15, linewidth=0)
        axis.set_xticks(sorted(frame["depth"].unique()))
        axis.set_xlabel("hidden layers")
        axis.legend(fontsize=7)
    axes[0].set_ylabel("nats")
    axes[0].set_title("KL(q_diag || q_full) from the samples, and its floors", fontsize=10)
    axes[1].axhline(0.0, color="black", linewidth=0.6)
    axes[1].set_ylabel("nats")
    axes[1].set_title("KL above the chain floor", fontsize=10)
    figure.suptitle("Reduced depth run: how much of the KL is the estimator's floor "
                    "(grey: no unit's chains pass)", fontsize=11)  # fmt: skip
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run's --out folder (holds samples/)")
    parser.add_argument(
        "--units", type=Path, default=HERE / "units",
        help="unit records (default: this folder's); the outputs go beside it",
    )  # fmt: skip
    args = parser.parse_args()
    out = args.units.parent
    units = sorted(args.units.glob("*.json"))
    rows = [unit_row(u, args.run / "samples") for u in units]
    frame = pd.DataFrame([r for r in rows if r is not None])
    if frame.empty:
        raise SystemExit(f"kl_null.py: none of the {len(units)} unit records in {args.units} "
                         f"has its samples in {args.run / 'samples'}")  # fmt: skip
    frame.sort_values(["activation", "depth", "repeat"]).to_csv(out / "kl_null.csv", index=False)
    print(f"{len(frame)} of {len(units)} units have their samples in {args.run / 'samples'}\n")
    summary = frame.groupby(["activation", "depth"])[
        ["kl_diag_full", "kl_null_iid", "kl_null_chains", "kl_excess"]
    ]
    print(summary.agg(["mean", "sem", "count"]).round(1).to_string())
    plot(frame, out / "kl_null.png")


if __name__ == "__main__":
    main()
