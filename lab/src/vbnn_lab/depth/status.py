"""Where the reference chains stand: ``vbnn reproduce depth --status RUN [RUN ...]``.

Every stored unit of the named depth runs in one table, ``status.csv``, and the same as a
Markdown table on stdout. One row per unit (run folder, points, activation, depth, repeat, chain
budget): its worst R-hat and bulk / tail ESS, divergent transitions, whether it is **mixed**
(every parameter's R-hat <= 1.05, bulk and tail ESS >= 100) and **trusted** by the runs'
stricter rule (mixed and no divergent transition: ``ConvergenceCriterion``'s defaults), its
KL(q_diag || q_full) above the chain floor extrapolated to infinitely many draws with that
extrapolation's drift (``kl_above_floor_limit``; see reproductions/depth/README.md), and its
cost. It reads the records in ``<run>/units/`` only (committed), so it runs anywhere, without
the chains. Means over a run's repeats are its ``depth_gap.csv`` (``report.aggregate``).

``status.png`` plots the KL limit against depth of one unit per data size, activation and depth
(``best_units``); ``--best`` prints those units only, with how many repeats each configuration
has and how many of them mixed and were trusted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from vbnn.plots import pyplot, save_figure
from vbnn.references.chain_diagnostics import ConvergenceCriterion
from vbnn.stores.atomic import write_atomic
from vbnn_lab.depth.report import trusted_units

COLUMNS = {
    "run": "run", "points": "points", "activation": "activation", "depth": "depth",
    "repeat": "repeat", "budget": "chains x (warm-up + draws)", "step_scale": "step / tuned",
    "sampler_rhat_max": "R-hat max", "ess": "bulk / tail ESS min",
    "sampler_divergences": "divergent",
    "mixed": "mixed", "trusted": "trusted", "limit": "KL limit (drift)",
    "gradients_m": "gradients (M)", "chain_hours": "chain hours",
}  # fmt: skip
CSV = ["run", "sampler", "points", "activation", "depth", "repeat", "chain_draws", "budget",
       "step_scale", "sampler_rhat_max", "sampler_bulk_ess_min", "sampler_tail_ess_min",
       "sampler_divergences", "mixed", "trusted", "kl_above_floor", "kl_above_floor_limit",
       "kl_above_floor_limit_drift", "sampler_gradient_evaluations", "sampler_seconds"]  # fmt: skip


def records_of(run: Path) -> list[dict]:
    """The unit records (their ``info``) stored in ``run/units``."""
    paths = sorted((run / "units").glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"{run / 'units'}: no unit records (*.json)")
    records = []
    for path in paths:
        info = json.loads(path.read_text())["info"]
        if "chains" not in info.get("settings", {}) or "sampler" not in info:
            raise ValueError(
                f"{path}: not a unit record of a multi-chain run (no sampler and chain settings; "
                "single-chain Pyro NUTS records are not covered)"
            )
        records.append(info)
    return records


def status(runs: list[Path]) -> pd.DataFrame:
    """One row per unit of ``runs``, sorted by points, activation, depth and draws a chain."""
    frames = []
    for run in runs:
        records = records_of(run)
        frame = trusted_units(records, ConvergenceCriterion())
        # mixed: the same verdict with divergences left out (R-hat and ESS alone)
        frame["mixed"] = trusted_units(records, ConvergenceCriterion(max_divergences=None))[
            "trusted"
        ]
        chains = [record["settings"]["chains"] for record in records]
        frame["run"] = run.name
        frame["seed"] = [record["settings"].get("seed", 0) for record in records]
        frame["chain_draws"] = [c["samples"] for c in chains]
        frame["budget"] = [
            f"{c['chains']} x ({c['warmup']} + {c['samples']})"
            + (f", tree depth <= {c['max_tree_depth']}" if r["sampler"] == "nuts" else "")
            for c, r in zip(chains, records, strict=True)
        ]
        frame["step_scale"] = [
            f"1/{c.get('step_scale', 1.0):g}" + (", L shared" if c.get("shared_length") else "")
            for c in chains
        ]
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    bulk_tail = zip(table["sampler_bulk_ess_min"], table["sampler_tail_ess_min"], strict=True)
    table["ess"] = [f"{bulk:.0f} / {tail:.0f}" for bulk, tail in bulk_tail]
    table["limit"] = [
        "" if math.isnan(limit) else f"{limit:.1f} ({drift:.1f})"
        for limit, drift in zip(
            table["kl_above_floor_limit"], table["kl_above_floor_limit_drift"], strict=True
        )
    ]
    if "sampler_gradient_evaluations" not in table:  # NUTS runs stored before it was counted
        table["sampler_gradient_evaluations"] = math.nan
    table["gradients_m"] = table["sampler_gradient_evaluations"] / 1e6
    table["chain_hours"] = table["sampler_seconds"] / 3600
    order = ["points", "activation", "depth", "chain_draws", "run", "repeat"]
    return table.sort_values(order, ignore_index=True)


def best_units(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (points, activation, depth): its mixed unit with the most draws a chain (its
    KL limit the most settled; among equals a trusted one first), else the unit with the lowest
    worst R-hat (ties: the one with the fewest divergent transitions); and in ``repeats``, how
    many repeats (data sets: seed and repeat) that configuration has, and how many of them have
    a mixed and a trusted unit (a repeat sampled twice, with another budget or step, counts
    once)."""
    key = ["points", "activation", "depth"]
    ranked = table.assign(
        unmixed=~table["mixed"],
        fewer_draws=np.where(table["mixed"], -table["chain_draws"], 0),  # among mixed units
        untrusted=~table["trusted"],
    ).sort_values(
        ["unmixed", "fewer_draws", "untrusted", "sampler_rhat_max", "sampler_divergences"],
        kind="stable",
    )
    best = ranked.groupby(key, sort=False).head(1)
    per_repeat = table.groupby([*key, "seed", "repeat"])[["mixed", "trusted"]].any()
    counts = per_repeat.groupby(key).agg(
        repeats=("mixed", "size"), mixed=("mixed", "sum"), trusted=("trusted", "sum")
    )
    counts["repeats"] = [
        f"{total} ({mixed} / {trusted})"
        for total, mixed, trusted in zip(
            counts["repeats"], counts["mixed"], counts["trusted"], strict=True
        )
    ]
    best = best.merge(counts[["repeats"]], left_on=key, right_index=True, validate="one_to_one")
    return best.sort_values(key, ignore_index=True)


def plot_limits(best: pd.DataFrame, path: Path) -> None:
    """The KL limit of ``best_units`` against depth, one panel a data size, one line an
    activation; the drift as error bar, a unit that has not mixed hollow, its draws a chain
    beside it."""
    sizes = sorted(best["points"].unique())
    figure, axes = pyplot().subplots(1, len(sizes), figsize=(6 * len(sizes), 4.2), squeeze=False)
    for axis, points in zip(axes[0], sizes, strict=True):
        groups = best[best["points"] == points].groupby("activation")
        shifts = np.linspace(-0.05, 0.05, len(groups))  # the activations side by side
        for shift, (activation, rows) in zip(shifts, groups, strict=True):
            rows = rows[rows["kl_above_floor_limit"].notna()]
            if rows.empty:
                continue
            depth = rows["depth"].to_numpy() + shift
            limit = rows["kl_above_floor_limit"].to_numpy()
            drift = rows["kl_above_floor_limit_drift"].abs().to_numpy()
            line = axis.errorbar(depth, limit, drift, marker="o", capsize=3, label=activation)
            unmixed = ~rows["mixed"].to_numpy(dtype=bool)
            axis.scatter(
                depth[unmixed], limit[unmixed], s=30, zorder=5, facecolors="white",
                edgecolors=line[0].get_color(),
            )  # fmt: skip
            for x, y, draws in zip(depth, limit, rows["chain_draws"], strict=True):
                axis.annotate(f"{draws}", (x, y), xytext=(4, 4), textcoords="offset points",
                              fontsize=7, color=line[0].get_color())  # fmt: skip
        axis.axhline(0.0, color="black", linewidth=0.6)
        axis.set_xticks(sorted(best["depth"].unique()))
        axis.set_xlabel("hidden layers")
        axis.set_ylabel("KL(q_diag || q_full) above the chain floor,\nextrapolated (nats)")
        axis.set_title(f"{points:,} two-moons points", fontsize=10)
        if axis.get_legend_handles_labels()[0]:  # a panel whose units have no limit has none
            axis.legend(fontsize=8)
    figure.suptitle(
        "The posterior's diagonal gap, one unit a depth (error bar: the extrapolation's drift; "
        "hollow: not mixed; label: draws a chain)", fontsize=10,
    )  # fmt: skip
    figure.tight_layout()
    save_figure(figure, path, dpi=120)


def markdown(table: pd.DataFrame) -> str:
    """``table``'s ``COLUMNS`` as a Markdown table (mixed and trusted in bold where true), with
    ``best_units``' repeat counts where it has them."""
    columns = {**COLUMNS, "repeats": "repeats (mixed / trusted)"} if "repeats" in table else COLUMNS
    shown = table[list(columns)].rename(columns=columns)
    for column in ("mixed", "trusted"):
        shown[column] = ["**yes**" if value else "no" for value in shown[column]]
    shown["divergent"] = [f"{value:.0f}" for value in shown["divergent"]]
    for column, digits in (("R-hat max", 3), ("gradients (M)", 2), ("chain hours", 2)):
        shown[column] = ["" if math.isnan(v) else f"{v:.{digits}f}" for v in shown[column]]
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in shown.itertuples(False)]
    return "\n".join(lines)


def run_status(runs: list[Path], out: Path, best: bool = False) -> pd.DataFrame:
    """Write ``status.csv`` (every unit of ``runs``) and ``status.png`` (``best_units``) to
    ``out`` and print the Markdown table of every unit, or with ``best`` of ``best_units``;
    returns the table of every unit."""
    table = status(runs)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "status.csv", table[CSV].to_csv(index=False, float_format="%.6g"))
    chosen = best_units(table)
    plot_limits(chosen, out / "status.png")
    print(markdown(chosen if best else table))
    return table
