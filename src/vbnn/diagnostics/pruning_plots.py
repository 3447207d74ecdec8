"""Per-unit panels of Figures 2 and 5 of Trippe & Turner 2017.

Each hidden unit j gets one column of three panels: top, the density of q(v_j) (its output
weight); middle, the densities of q(w_ji) for every incoming weight and the bias, with the prior
dashed; bottom, the histogram of its activations h_j(x) over all training points under 25 weight
draws from q.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vbnn.diagnostics.pruning import UnitDiagnostics, pruned_units
from vbnn.plots import pyplot, save_figure


def _normal_pdf(grid: np.ndarray, mean: float, std: float) -> np.ndarray:
    return np.exp(-0.5 * ((grid - mean) / std) ** 2) / (std * np.sqrt(2 * np.pi))


def _draw_unit(axes: Sequence, diagnostics: UnitDiagnostics, model: int, unit: int, label: str):
    top, middle, bottom = axes
    mean = float(diagnostics.output_mean[model, unit, 0])
    std = float(diagnostics.output_std[model, unit, 0])
    width = max(4 * std, abs(mean) + 4 * std, 0.05)
    grid = np.linspace(mean - width, mean + width, 400)
    if std > 0:
        top.plot(grid, _normal_pdf(grid, mean, std), color="C0")
    else:
        top.axvline(mean, color="C0")
    top.axvline(0.0, color="grey", lw=0.5)
    top.set_title(label, fontsize=8)
    prior = diagnostics.prior_std
    means = diagnostics.incoming_mean[model, :, unit].numpy()
    stds = diagnostics.incoming_std[model, :, unit].numpy()
    reach = max(3.5 * prior, float(np.max(np.abs(means) + 3 * stds)))
    grid = np.linspace(-reach, reach, 800)
    for m, s in zip(means, stds, strict=True):
        if s > 0:
            middle.plot(grid, _normal_pdf(grid, m, s), lw=0.7)
    middle.plot(grid, _normal_pdf(grid, 0.0, prior), "k--", lw=1.0)
    middle.set_xlim(grid[0], grid[-1])
    activations = diagnostics.sampled_activations[:, model, :, unit].flatten().numpy()
    bottom.hist(activations, bins=30, range=(-1, 1), color="C2")
    for axis in axes:
        axis.tick_params(labelsize=6)
        axis.locator_params(axis="x", nbins=3)
        axis.set_yticks([])


# Parameters: a figure's entry point: what to plot and where, then independent options;
# ``thresholds`` go to ``pruned_units``
def plot_units(
    diagnostics: UnitDiagnostics,
    units: Sequence[int],
    path: str | Path,
    model: int = 0,
    columns: int = 10,
    title: str | None = None,
    **thresholds: float,
) -> Path:
    """Write a grid of per-unit columns (3 panels each) for ``units`` of one model to ``path``."""
    if not units:
        raise ValueError("plot_units: no units to plot")
    pruned = pruned_units(diagnostics, **thresholds)[model]
    columns = min(columns, len(units))
    blocks = -(-len(units) // columns)
    figure, axes = pyplot().subplots(
        3 * blocks,
        columns,
        figsize=(max(6.5, 1.7 * columns + 0.5), 3.6 * blocks + 0.9),
        squeeze=False,
    )
    for index, unit in enumerate(units):
        block, column = divmod(index, columns)
        state = "pruned" if bool(pruned[unit]) else "active"
        _draw_unit(
            axes[3 * block : 3 * block + 3, column], diagnostics, model, unit, f"{unit}: {state}"
        )
    for index in range(len(units), blocks * columns):
        block, column = divmod(index, columns)
        for row in range(3):
            axes[3 * block + row, column].axis("off")
    axes[0, 0].set_ylabel("q(v_j)", fontsize=7)
    axes[1, 0].set_ylabel("q(w_ji)", fontsize=7)
    axes[2, 0].set_ylabel("h_j(x)", fontsize=7)
    if title:
        figure.suptitle(title, fontsize=9)
    height = 3.6 * blocks + 0.9
    # subplots_adjust, not tight_layout: measuring 150 axes' text costs seconds.
    figure.subplots_adjust(left=0.04, right=0.99, bottom=0.3 / height, top=1 - 0.9 / height,
                           hspace=0.45, wspace=0.15)  # fmt: skip
    return save_figure(figure, path, dpi=110)


def representative_units(diagnostics: UnitDiagnostics, model: int = 0) -> list[int]:
    """Figure 2's pair: the active unit with the largest |E v_j| and the first pruned unit."""
    pruned = pruned_units(diagnostics)[model]
    magnitude = diagnostics.output_mean[model, :, 0].abs()
    active = int(magnitude.argmax())
    pruned_ids = pruned.nonzero().flatten().tolist()
    return [active, pruned_ids[0]] if pruned_ids else [active]
