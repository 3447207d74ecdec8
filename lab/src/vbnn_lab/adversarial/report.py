"""Tables and the figure of the attack experiment (like Neklyudov et al. 2019 Fig. 7 / Neklyudov et
al. 2018 Fig. 2)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vbnn.plots import pyplot, save_figure


def summary_table(frame: pd.DataFrame, iterations: tuple[int, ...]) -> pd.DataFrame:
    """Success rate (%) and mean entropy at chosen iterations, one row per dataset x predictor."""
    rows = []
    for (dataset, predictor), group in frame.groupby(["dataset", "predictor"], sort=False):
        indexed = group.set_index("iteration")
        row = {"dataset": dataset, "predictor": predictor}
        for s in iterations:
            if s in indexed.index:
                row[f"success % @{s}"] = 100.0 * indexed.loc[s, "success_rate"]
        for s in iterations:
            if s in indexed.index:
                row[f"entropy @{s}"] = indexed.loc[s, "mean_entropy"]
        rows.append(row)
    return pd.DataFrame(rows)


def plot_attacks(frame: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Success rate and mean predictive entropy vs iteration, one row of panels per data set."""
    datasets = list(dict.fromkeys(frame["dataset"]))
    figure, axes = pyplot().subplots(
        len(datasets), 2, figsize=(10, 3.6 * len(datasets)), squeeze=False
    )
    for row, dataset in zip(axes, datasets, strict=True):
        part = frame[frame["dataset"] == dataset]
        for predictor, group in part.groupby("predictor", sort=False):
            row[0].plot(group["iteration"], 100.0 * group["success_rate"], label=predictor)
            row[1].plot(group["iteration"], group["mean_entropy"], label=predictor)
        row[0].set(xlabel="# iteration", ylabel="successful attacks (%)", title=dataset)
        row[1].set(xlabel="# iteration", ylabel="mean predictive entropy (nats)", title=dataset)
        row[0].legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return save_figure(figure, path, dpi=120)
