"""A comparison's report: mean +- standard error over folds, paired gaps to the best family, the
verdict and the figure.

The best family has the highest mean test log-likelihood. For every other family f the gap is
paired over the folds: d_k = LL_f,k - LL_best,k on fold k (both trained on the same rows and
tested on the same rows), reported as mean(d) +- SEM(d) with SEM(d) = std(d, ddof=1) / sqrt(K).
Pairing removes the fold-to-fold variation that both share, so the SEM of the gap is usually far
below the two SEMs of the means. A family *ties* with the best when |mean(d)| < 2 SEM(d) (or the
gap is exactly 0); otherwise it is worse by mean(d).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from vbnn.comparison import scores
from vbnn.comparison.folds import Task
from vbnn.plots import pyplot, save_figure
from vbnn.regression.report import mean_and_standard_error

# fold-frame column -> table heading, per task
METRICS = {
    Task.REGRESSION: {name: metric.heading for name, metric in scores.REGRESSION.items()},
    Task.CLASSIFICATION: {name: metric.heading for name, metric in scores.CLASSIFICATION.items()},
}
# out-of-distribution detection (a network compared with ``ood=``): frame column -> heading
OUT_OF_DISTRIBUTION = {
    f"{score} {metric}": f"{metric} ({heading})"
    for score, heading in (("entropy", "entropy"), ("mutual_information", "MI"))
    for metric in ("AUROC", "AUPR", "FPR95")
}


def metric_columns(folds: pd.DataFrame, task: Task) -> dict[str, str]:
    """The task's metrics and the out-of-distribution ones the frame holds: column -> heading."""
    present = {k: v for k, v in OUT_OF_DISTRIBUTION.items() if k in folds.columns}
    return {**METRICS[task], **present}


def summary_frame(folds: pd.DataFrame, task: Task) -> pd.DataFrame:
    """Per family: mean and standard error over folds of every metric, and the summed seconds.

    Args:
        folds: one row per (family, fold) with columns ``family``, ``fold``, ``seconds``,
            ``tuning_seconds`` and the task's metric columns (``METRICS``; any of
            ``OUT_OF_DISTRIBUTION``).

    Returns:
        Indexed by family, best mean test LL first; columns ``<metric>`` and ``<metric> sem``,
        ``folds``, ``seconds`` (training) and ``tuning seconds``, summed over folds.
    """
    rows = []
    for family, part in folds.groupby("family", sort=False):
        row: dict[str, object] = {"family": family}
        for column in metric_columns(folds, task):
            values = part[column].dropna().tolist()
            mean, sem = mean_and_standard_error(values) if values else (float("nan"),) * 2
            row[column], row[f"{column} sem"] = mean, sem
        row["folds"], row["seconds"] = len(part), float(part["seconds"].sum())
        row["tuning seconds"] = float(part["tuning_seconds"].sum())
        rows.append(row)
    frame = pd.DataFrame(rows).set_index("family")
    return frame.sort_values("log_likelihood", ascending=False, kind="stable")


def paired_gaps(folds: pd.DataFrame) -> pd.DataFrame:
    """Each family's test-LL gap to the best family, paired over the folds both have.

    Returns:
        Indexed by family (the best first, gap 0): ``gap`` (mean of d_k = LL_f,k - LL_best,k),
        ``sem`` (std(d, ddof=1) / sqrt(K)), ``tie`` (|gap| < 2 sem, or gap == 0).
    """
    by_family = {
        family: part.set_index("fold")["log_likelihood"]
        for family, part in folds.groupby("family", sort=False)
    }
    means = {family: values.mean() for family, values in by_family.items()}
    finite = [family for family, mean in means.items() if np.isfinite(mean)]
    if not finite:
        raise ValueError("paired_gaps: no family has a finite mean test log-likelihood")
    best = max(finite, key=means.__getitem__)
    rows = []
    for family, values in by_family.items():
        shared = values.index.intersection(by_family[best].index)
        gap, sem = mean_and_standard_error((values[shared] - by_family[best][shared]).tolist())
        rows.append(
            {"family": family, "gap": gap, "sem": sem, "tie": gap == 0 or abs(gap) < 2 * sem}
        )
    frame = pd.DataFrame(rows).set_index("family")
    return frame.loc[[best, *(f for f in frame.index if f != best)]]


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def verdict(gaps: pd.DataFrame) -> str:
    """A plain sentence from :func:`paired_gaps`, e.g. "mf and gd tie; fc is worse by
    0.12 +- 0.03 nats" (test log-likelihood per row, paired over the folds)."""
    names = list(gaps.index)
    if len(names) == 1:
        return f"{names[0]} is the only family compared"
    tied = [f for f in names if gaps.loc[f, "tie"]]
    parts = [f"{_join(tied)} tie" if len(tied) > 1 else f"{tied[0]} is best"]
    for family in names:
        if family not in tied:
            gap, sem = gaps.loc[family, "gap"], gaps.loc[family, "sem"]
            parts.append(f"{family} is worse by {-gap:.2f} +- {sem:.2f} nats")
    return "; ".join(parts)


def display_table(
    summary: pd.DataFrame, gaps: pd.DataFrame, task: Task, level: float
) -> pd.DataFrame:
    """The printed table: every metric as "mean +- sem", the paired gap and whether it is a tie,
    the training and tuning seconds summed over folds."""
    headings = metric_columns(summary, task)
    if "coverage" in headings:
        headings["coverage"] = f"{level:.0%} coverage"
    rows = []
    for family, row in summary.iterrows():
        cells = {"family": family}
        for column, heading in headings.items():
            mean, sem = row[column], row[f"{column} sem"]
            cells[heading] = "n/a" if pd.isna(mean) else f"{mean:.3f} +- {sem:.3f}"
        gap, sem = gaps.loc[family, "gap"], gaps.loc[family, "sem"]
        best = family == gaps.index[0]
        cells["LL gap to best"] = "best" if best else f"{gap:+.3f} +- {sem:.3f}"
        cells["vs best"] = "best" if best else ("tie" if gaps.loc[family, "tie"] else "worse")
        cells["folds"] = int(row["folds"])
        cells["train s"] = round(float(row["seconds"]), 1)
        cells["tune s"] = round(float(row["tuning seconds"]), 1)
        rows.append(cells)
    return pd.DataFrame(rows).set_index("family")


def plot_comparison(folds: pd.DataFrame, summary: pd.DataFrame, path: str | Path | None = None):
    """Test LL per fold (points, one line per fold across families) with mean +- SEM (bars),
    families ordered best first. Written to ``path`` when given; returns the figure."""
    figure, axis = pyplot().subplots(figsize=(1.2 + 1.1 * len(summary), 3.6))
    order = list(summary.index)
    position = {family: i for i, family in enumerate(order)}
    for _, part in folds.groupby("fold"):
        part = part.set_index("family").loc[[f for f in order if f in set(part["family"])]]
        x = [position[f] for f in part.index]
        axis.plot(
            x,
            part["log_likelihood"],
            color="0.75",
            linewidth=0.8,
            marker="o",
            markersize=3,
            zorder=1,
        )
    axis.errorbar(
        range(len(order)),
        summary["log_likelihood"],
        yerr=summary["log_likelihood sem"],
        fmt="s",
        color="C0",
        capsize=4,
        zorder=2,
        label="mean +- SEM",
    )
    axis.set_xticks(range(len(order)), order)
    axis.set_ylabel("test log-likelihood (nats per row)")
    axis.set_title("families compared over the same folds (grey: one fold)")
    axis.legend(loc="best", fontsize=8)
    figure.tight_layout()
    if path is not None:
        save_figure(figure, path, close=False)
    return figure
