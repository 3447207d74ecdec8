"""Tables and figure of ``vbnn reproduce uci-depth``: test LL and pruned units vs depth.

The gap of MF to a richer family at depth L is the paired difference over splits,

    gap_L = mean_k (LL_MF(k) - LL_other(k)),   SEM = std_k(.) / sqrt(K),

(the methods share each split's data, so pairing removes the split-to-split spread). The gap
*shrinks* with depth when gap_3 - gap_1 > 2 sqrt(SEM_1^2 + SEM_3^2) for a negative gap_1 (MF
behind), i.e. MF catches up by more than two combined standard errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from vbnn.diagnostics.layer_pruning import count_pruned_per_layer
from vbnn.plots import pyplot, save_figure
from vbnn.regression.engine import TrainedStack
from vbnn.regression.report import mean_and_standard_error
from vbnn.regression.runs import TrainConfig, VIConfig
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table

COMPARED = ("fc", "gd")  # MF's gap is measured to these


def pruned_counts_metric(
    config: TrainConfig, values: Mapping[int, Mapping[str, float]]
) -> Callable[[TrainedStack], dict[int, dict[str, Any]]]:
    """A ``stack_metrics`` hook: the pruned units of every hidden layer, per split.

    The KL refers to each split's prior std (its tuned value, else ``config.prior_std``).
    Point weights (ES) have no posterior spread; they get no count.
    """

    def metric(stack: TrainedStack) -> dict[int, dict[str, Any]]:
        if not isinstance(config, VIConfig):  # point weights have no posterior spread
            return {}
        keys = list(stack.data.split_ids)
        prior = torch.tensor([values.get(k, {}).get("prior_std", config.prior_std) for k in keys])
        counts = count_pruned_per_layer(stack.model, prior)
        return {k: {"pruned_per_layer": counts[m].tolist()} for m, k in enumerate(keys)}

    return metric


def summary_frame(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per (data set, method, depth): mean, SEM, splits, mean pruned units per layer."""
    rows = []
    for record in records:
        values = [s.test_log_likelihood for s in record["result"].splits]
        mean, sem = mean_and_standard_error(values)
        counts = [m["pruned_per_layer"] for m in record["metrics"].values()
                  if "pruned_per_layer" in m]  # fmt: skip
        pruned = " / ".join(f"{c:.1f}" for c in np.mean(counts, axis=0)) if counts else ""
        chosen = ", ".join(f"{k}={v:.3g}" for k, v in record["values"].items())
        rows.append({"dataset": record["dataset"], "method": record["method"].upper(),
                     "depth": record["depth"], "mean": mean, "sem": sem, "splits": len(values),
                     "pruned_per_layer": pruned, "chosen": chosen})  # fmt: skip
    return pd.DataFrame(rows)


def gap_frame(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """MF minus FC and MF minus GD per (data set, depth), paired over the splits both have."""
    by_key = {(r["dataset"], r["method"], r["depth"]): r["result"] for r in records}
    rows = []
    for (dataset, method, depth), mf in by_key.items():
        if method != "mf":
            continue
        ours = {s.split: s.test_log_likelihood for s in mf.splits}
        for other in COMPARED:
            if (dataset, other, depth) not in by_key:
                continue
            theirs = {s.split: s.test_log_likelihood for s in by_key[dataset, other, depth].splits}
            shared = sorted(set(ours) & set(theirs))
            if not shared:
                continue
            mean, sem = mean_and_standard_error([ours[k] - theirs[k] for k in shared])
            rows.append({"dataset": dataset, "versus": other.upper(), "depth": depth,
                         "gap": mean, "sem": sem, "splits": len(shared)})  # fmt: skip
    return pd.DataFrame(rows, columns=["dataset", "versus", "depth", "gap", "sem", "splits"])


def shrinks(gaps: pd.DataFrame) -> pd.DataFrame:
    """Per (data set, versus): gap at the smallest and largest depth and the verdict.

    The verdict compares the change of the gap from the smallest to the largest depth with two
    combined SEMs: "grows" when MF falls behind by more (also from level or ahead), "shrinks"
    when a deficit closes by more, "MF not behind at the smallest depth" when it starts level or
    ahead and does not fall behind, else "no significant change".
    """
    rows = []
    for (dataset, versus), part in gaps.groupby(["dataset", "versus"], sort=False):
        part = part.sort_values("depth")
        first, last = part.iloc[0].to_dict(), part.iloc[-1].to_dict()
        if first["depth"] == last["depth"]:
            continue
        change = last["gap"] - first["gap"]
        bound = 2 * math.hypot(first["sem"], last["sem"])
        if change < -bound:  # MF falls (further) behind, wherever it started
            verdict = "grows"
        elif first["gap"] >= 0:
            verdict = "MF not behind at the smallest depth"
        elif change > bound:
            verdict = "shrinks"
        else:
            verdict = "no significant change"
        rows.append({"dataset": dataset, "MF versus": versus,
                     "depths": f"{first['depth']} -> {last['depth']}",
                     "gap, smallest depth": f"{first['gap']:.2f} +- {first['sem']:.2f}",
                     "gap, largest depth": f"{last['gap']:.2f} +- {last['sem']:.2f}",
                     "verdict": verdict})  # fmt: skip
    return pd.DataFrame(rows)


def plot_depth(summary: pd.DataFrame, path: Path) -> Path:
    """Test LL (mean +- SEM) against depth, one panel per data set, one line per method."""
    datasets = list(dict.fromkeys(summary["dataset"]))
    columns = min(3, len(datasets))
    rows = -(-len(datasets) // columns)
    figure, axes = pyplot().subplots(
        rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False
    )
    for axis, dataset in zip(axes.flat, datasets, strict=False):
        part = summary[summary["dataset"] == dataset]
        for method, lines in part.groupby("method", sort=False):
            lines = lines.sort_values("depth")
            axis.errorbar(lines["depth"], lines["mean"], yerr=lines["sem"], marker="o",
                          capsize=2, label=method)  # fmt: skip
        axis.set_xticks(sorted(set(part["depth"])))
        axis.set_title(dataset, fontsize=10)
        axis.set_xlabel("hidden layers of 50 units", fontsize=8)
        axis.set_ylabel("test log-likelihood", fontsize=8)
    for axis in list(axes.flat)[len(datasets) :]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=8)
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)


def write_report(records: list[Mapping[str, Any]], out: Path, notes: Iterable[str]) -> list[Path]:
    """``depth_table.md``, ``depth_table.csv``, ``depth_gaps.csv`` and ``depth_figure.png``."""
    summary = summary_frame(records)
    gaps = gap_frame(records)
    write_atomic(out / "depth_table.csv", summary.to_csv(index=False))
    write_atomic(out / "depth_gaps.csv", gaps.to_csv(index=False))
    cells = [f"{m:.2f} +- {s:.2f}" for m, s in zip(summary["mean"], summary["sem"], strict=True)]
    wide = summary.assign(cell=cells)
    table = wide.pivot(index=["dataset", "method"], columns="depth", values="cell")
    table.columns = [f"depth {d}" for d in table.columns]
    pruned = summary[summary["pruned_per_layer"] != ""].pivot(
        index=["dataset", "method"], columns="depth", values="pruned_per_layer"
    )
    pruned.columns = [f"depth {d}" for d in pruned.columns]
    chosen = "; ".join(f"{r.dataset} {r.method} depth {r.depth}: {r.chosen}"
                       for r in summary.itertuples())  # fmt: skip
    lines = [
        "# Test log-likelihood vs depth (hidden layers of 50 tanh units)",
        "",
        "Cells: mean +- SEM over splits (nats, higher is better).",
        "",
        markdown_table(table, index=True),
        "",
        "## Pruned units per hidden layer (mean over splits, first layer first)",
        "",
        "A unit is pruned when all its outgoing weights have SNR < 3 and all its incoming "
        "weights have a KL to the prior below 0.05 nats (vbnn.diagnostics.layer_pruning).",
        "",
        markdown_table(pruned, index=True) if not pruned.empty else "(no MF, GD or FC runs)",
        "",
        "## MF's gap (MF - other, paired over splits) at the smallest and largest depth",
        "",
        markdown_table(shrinks(gaps)) if not gaps.empty else "(needs MF and FC or GD)",
        "",
        "Hyper-parameters chosen (tuned once on split 0's training rows): " + chosen,
        *[f"\n{note}" for note in notes],
        "",
    ]
    write_atomic(out / "depth_table.md", "\n".join(lines))
    figure = plot_depth(summary, out / "depth_figure.png")
    return [out / "depth_table.md", out / "depth_table.csv", out / "depth_gaps.csv", figure]
