"""Figures a user looks at: the predictive band of a 1-D regression, a reliability diagram and
metrics under dataset shift.

Each function draws on a new matplotlib figure (Agg backend), writes it to ``path`` atomically
when given one, and returns the figure so that a notebook can show or restyle it.

``pyplot`` and ``save_figure`` are the one way the package draws and writes a figure; the
experiments' and diagnostics' figures use them too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from vbnn.metrics import expected_calibration_error, reliability_table
from vbnn.stores.atomic import write_atomic

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, not with the module
    import pandas as pd
    from matplotlib.figure import Figure
    from numpy.typing import ArrayLike

# metric column -> axis label, in the order the shift figure draws them
SHIFT_METRICS = {
    "accuracy": "accuracy",
    "nll": "NLL",
    "log_likelihood": "test LL",
    "ece": "ECE",
    "brier": "Brier",
}


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display), imported when a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def save_figure(figure: Figure, path: str | Path, dpi: int = 120, close: bool = True) -> Path:
    """Write ``figure`` to ``path`` atomically (``stores.atomic.write_atomic``, which creates the
    parent folders), in the format of its suffix (png without one), and close it when ``close``.

    Args:
        figure: the matplotlib figure.
        path: where to write it.
        dpi: the resolution in dots per inch.
        close: free the figure after writing it; a function that returns it passes False.

    Returns:
        ``path`` as a Path.
    """
    path = Path(path)
    suffix = path.suffix.lstrip(".") or "png"
    write_atomic(path, lambda file: figure.savefig(file, dpi=dpi, format=suffix))
    if close:
        pyplot().close(figure)
    return path


# Parameters: a public plot; the curve, the optional data, then independent keyword-only options
def plot_predictive_band(
    x: ArrayLike,
    mean: ArrayLike,
    std: ArrayLike,
    x_train: ArrayLike | None = None,
    y_train: ArrayLike | None = None,
    *,
    path: str | Path | None = None,
    level: float = 2.0,
) -> Figure:
    """The predictive mean of a 1-D regression with a band of +-``level`` std, and the data.

    Args:
        x: (N,) inputs, sorted or not (the three arrays are sorted by x here).
        mean: (N,) predictive means at ``x``.
        std: (N,) predictive standard deviations at ``x``.
        x_train: optional training inputs, drawn as dots with ``y_train``.
        y_train: optional training targets.
        path: where to write the figure (its suffix picks the format); None writes nothing.
        level: the band's half-width in standard deviations.

    Returns:
        The matplotlib figure.
    """
    x, mean, std = (np.asarray(v, dtype=float).reshape(-1) for v in (x, mean, std))
    if not len(x) == len(mean) == len(std):
        raise ValueError(
            f"x, mean, std must have one length, got {len(x)}, {len(mean)}, {len(std)}"
        )
    order = np.argsort(x)
    x, mean, std = x[order], mean[order], std[order]
    figure, axis = pyplot().subplots(figsize=(6, 4))
    axis.fill_between(x, mean - level * std, mean + level * std, alpha=0.3,
                      label=f"mean +- {level:g} std")  # fmt: skip
    axis.plot(x, mean, label="predictive mean")
    if x_train is not None and y_train is not None:
        axis.scatter(np.ravel(x_train), np.ravel(y_train), s=8, color="black", label="data")
    axis.set(xlabel="x", ylabel="y")
    axis.legend()
    figure.tight_layout()
    if path is not None:
        save_figure(figure, path, close=False)
    return figure


def plot_reliability(
    probabilities: ArrayLike | torch.Tensor,
    labels: ArrayLike | torch.Tensor,
    bins: int = 15,
    path: str | Path | None = None,
) -> Figure:
    """Accuracy against confidence per equal-width bin, with the ECE (``bins`` stated) in the
    title; bars show the share of examples per bin.

    Args:
        probabilities: (N, C) predictive probabilities.
        labels: (N,) integer classes in [0, C).
        bins: the number of equal-width confidence bins (``metrics.reliability_table``).
        path: where to write the figure (its suffix picks the format); None writes nothing.

    Returns:
        The matplotlib figure.
    """
    probabilities, labels = torch.as_tensor(probabilities), torch.as_tensor(labels)
    table = reliability_table(probabilities, labels, bins)
    ece = float(expected_calibration_error(probabilities, labels, bins))
    figure, (top, bottom) = pyplot().subplots(2, 1, figsize=(5, 6), sharex=True,
                                              gridspec_kw={"height_ratios": [3, 1]})  # fmt: skip
    centres = ((table["lower"] + table["upper"]) / 2).numpy()
    width = float(table["upper"][0] - table["lower"][0])
    filled = table["count"].numpy() > 0
    top.bar(centres[filled], table["accuracy"].numpy()[filled], width=width, edgecolor="black",
            label="accuracy")  # fmt: skip
    top.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect calibration")
    top.set(ylabel="accuracy", title=f"ECE {100 * ece:.2f} % ({bins} equal-width bins)")
    top.legend()
    share = table["count"].numpy() / max(1, int(table["count"].sum()))
    bottom.bar(centres, share, width=width, edgecolor="black")
    bottom.set(xlabel="confidence (max probability)", ylabel="share")
    figure.tight_layout()
    if path is not None:
        save_figure(figure, path, close=False)
    return figure


def plot_shift(
    results: pd.DataFrame, metrics: Sequence[str] | None = None, path: str | Path | None = None
) -> Figure:
    """Each metric against the shift's intensity, one line per entry (Ovadia et al. 2019's
    figures): a row of panels per metric, a column per shift.

    Rows that repeat an (entry, shift, intensity) (seeds, folds) are averaged; the error bars
    are then their standard errors.

    Args:
        results: a frame with columns ``entry``, ``shift`` (the kind, e.g. "rotation"),
            ``intensity`` (degrees or severity) and the metric columns.
        metrics: the columns to draw; None: those of ``SHIFT_METRICS`` the frame holds.
        path: where to write the figure (its suffix picks the format); None writes nothing.

    Returns:
        The matplotlib figure.
    """
    missing = [c for c in ("entry", "shift", "intensity") if c not in results.columns]
    if missing or results.empty:
        raise ValueError(
            f"results need rows and the columns entry, shift, intensity; missing {missing}, "
            f"{len(results)} rows"
        )
    if metrics is None:
        metrics = [name for name in SHIFT_METRICS if name in results.columns]
    unknown = [name for name in metrics if name not in results.columns]
    if unknown or not metrics:
        raise ValueError(f"metric columns {unknown or 'none'} not in {list(results.columns)}")
    shifts = list(dict.fromkeys(results["shift"]))
    figure, axes = pyplot().subplots(
        len(metrics), len(shifts), squeeze=False, figsize=(3.2 * len(shifts), 2.6 * len(metrics))
    )
    grouped = results.groupby(["shift", "entry", "intensity"], sort=True)[list(metrics)]
    means, errors = grouped.mean(), grouped.sem().fillna(0.0)
    for column, shift in enumerate(shifts):
        for row, metric in enumerate(metrics):
            axis = axes[row, column]
            for entry in dict.fromkeys(results["entry"][results["shift"] == shift]):
                line = means.loc[(shift, entry), metric]
                axis.errorbar(
                    line.index,
                    line.to_numpy(),
                    yerr=errors.loc[(shift, entry), metric],
                    marker="o",
                    markersize=3,
                    capsize=2,
                    label=str(entry),
                )
            axis.set(
                xlabel=f"{getattr(shift, 'value', shift)} intensity",
                ylabel=SHIFT_METRICS.get(metric, metric),
            )
    axes[0, 0].legend(fontsize="small")
    figure.tight_layout()
    if path is not None:
        save_figure(figure, path, close=False)
    return figure
