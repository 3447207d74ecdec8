"""How far does the posterior's curvature vary along a depth run's chains, and do divergent
transitions start where it is largest? ``vbnn reproduce depth --curvature RUN``:
``curvature.csv``, ``curvature_points.csv`` and ``curvature.png`` in the run folder.

For every unit of ``<run>/units`` whose chains are in ``<run>/samples``: at ``--per-chain``
evenly spaced draws of each chain (and at every draw from which a transition diverged, where the
unit stored them), the largest eigenvalue lambda of the preconditioned Hessian diag(s) H diag(s)
of the unit's potential (``vbnn.references.curvature.largest_curvature``), with s the chain's own
standard deviations (the diagonal preconditioner MAMS tunes estimates the same), and
h = eps sqrt(lambda / D) with eps the chain's tuned step size and D the parameters: the
microcanonical samplers (MAMS, MCLMC) move at unit speed, so a step of eps spreads over D
coordinates and stands for a Hamiltonian step of eps / sqrt(D) (hence BlackJAX's initial step
size of 0.25 sqrt(D)); the integrator is stable only while h stays below a constant of order 1.
``curvature.csv`` gives per unit the quantiles of h over the evenly spaced draws, how far
lambda's largest value lies above its median (its square root is the factor by which eps would
have to shrink for the worst visited draw to look like a typical one: the cost of a step size
tuned to the worst draw), the rank correlation of log lambda with each layer's weight norm, with
the log density and with the sum over the training points of p (1 - p) (the weight of the
likelihood's Gauss-Newton curvature), whether the stiffest directions of the most curved 5 % of
the draws are few and shared (which a constant dense preconditioner could fold in) or many, and
the percentile of h at the divergent starts among the evenly spaced draws.

With ``--depths``, only the units of those depths (every table keeps the rows of the others);
with ``--plot-only``, ``curvature.png`` again from ``curvature_points.csv``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from vbnn.plots import pyplot, save_figure
from vbnn.references.curvature import largest_curvature
from vbnn.references.jax_potential import jax_potential
from vbnn.references.mixing import layer_log_norms, network_outputs
from vbnn_lab.depth.stored_chains import settings_of, unit_columns, units_with_chains, write_table
from vbnn_lab.depth.units import two_moons, unit_seed

# a reference mark for h: the leapfrog integrator's stability limit on a quadratic (the two-stage
# isokinetic integrator of MAMS has its own, of the same order)
STABILITY_MARK = 2.0


def measure_unit(
    record: dict, arrays: dict, chains: dict, per_chain: int
) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per measured draw (chain, draw, lambda, h, whether a divergence started there,
    each layer's log weight norm, ...) and the draws' top eigenvectors as parameter-space
    directions in units of the pooled standard deviations (rows, D), unit length."""
    settings = settings_of(record["settings"])
    seed = unit_seed(settings)
    x, y = two_moons(settings.points, settings.noise, seed, torch.float32)
    architecture = settings.architecture()
    potential = jax_potential(architecture, x.numpy(), y.numpy())
    draws = arrays["samples"]
    diverging = arrays.get("diverging", np.zeros(draws.shape[:2], bool))
    steps = np.asarray(chains["chain_step_size"]) / np.sqrt(draws.shape[-1])
    frames, directions = [], []
    pooled_scale = draws.reshape(-1, draws.shape[-1]).std(axis=0)
    for chain, chain_draws in enumerate(draws):
        even = np.linspace(0, len(chain_draws) - 1, per_chain).round().astype(int)
        starts = np.flatnonzero(diverging[chain, 1:])  # transition t started from draw t - 1
        index = np.concatenate([even, starts])
        points = chain_draws[index]
        scale = chain_draws.std(axis=0)
        curvature, vectors = largest_curvature(potential, points, scale, seed=chain)
        moved = vectors * scale / pooled_scale  # the eigenvector as a move of theta / pooled sd
        directions.append(moved / np.linalg.norm(moved, axis=-1, keepdims=True))
        frame = pd.DataFrame({
            "chain": chain, "draw": index, "evenly_spaced": np.arange(len(index)) < len(even),
            "divergence_start": np.arange(len(index)) >= len(even), "curvature": curvature,
            "h": steps[chain] * np.sqrt(np.clip(curvature, 0, None)),
            "log_density": arrays["log_density"][chain, index],
        })  # fmt: skip
        for layer, norms in enumerate(layer_log_norms(points, architecture.sizes).T):
            frame[f"layer_{layer}_log_norm"] = norms
        # the likelihood's Gauss-Newton curvature is sum_n p_n (1 - p_n) J_n J_n': its weight
        logits, _ = network_outputs(points[None], architecture, x.numpy())
        probability = 1 / (1 + np.exp(-np.clip(logits[0], -50, 50)))
        frame["bernoulli_variance_sum"] = (probability * (1 - probability)).sum(axis=-1)
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    for key, value in reversed(unit_columns(record).items()):
        table.insert(0, key, value)
    return table, np.concatenate(directions)


def shared_directions(directions: np.ndarray) -> dict[str, float]:
    """Are the top eigenvectors (rows, unit length) of the most curved draws few and shared?
    Mean |cosine| over pairs, and the share of their summed squares that the first one and
    first three principal directions carry (1 / rows for directions with nothing in common)."""
    if len(directions) < 2:
        return {"top_directions": len(directions)}
    cosines = np.abs(directions @ directions.T)[np.triu_indices(len(directions), 1)]
    energy = np.linalg.svd(directions, compute_uv=False) ** 2
    energy = energy / energy.sum()
    return {
        "top_directions": len(directions),
        "top_directions_mean_abs_cosine": float(cosines.mean()),
        "top_directions_first_share": float(energy[0]),
        "top_directions_first_three_share": float(energy[:3].sum()),
    }


def summarise(points: pd.DataFrame, directions: np.ndarray, record: dict, chains: dict) -> dict:
    """One unit's row of ``curvature.csv``; ``directions`` (rows of ``points``, D)."""
    even = points[points["evenly_spaced"]]
    curvature = even["curvature"].to_numpy()
    row = unit_columns(record)
    row.update(
        divergences=chains.get("divergences", np.nan),
        step_size_by_chain=json.dumps([round(v, 4) for v in chains["chain_step_size"]]),
        negative_share=float((curvature < 0).mean()),
        h_median=float(even["h"].median()), h_q90=float(even["h"].quantile(0.9)),
        h_q99=float(even["h"].quantile(0.99)), h_max=float(even["h"].max()),
        share_h_above_mark=float((even["h"] > STABILITY_MARK).mean()),
        # the share of transitions that diverged, beside the share of draws past the mark
        divergent_share=chains.get("divergences", np.nan)
        / (record["settings"]["chains"]["chains"] * record["settings"]["chains"]["samples"]),
        curvature_max_over_median=float(np.abs(curvature).max() / np.median(np.abs(curvature))),
    )  # fmt: skip
    row["step_shrink_for_worst"] = float(np.sqrt(row["curvature_max_over_median"]))
    log_curvature = np.log(np.abs(curvature))
    features = ["log_density", "bernoulli_variance_sum"]
    for column in [*features, *[c for c in points if c.endswith("_log_norm")]]:
        row[f"rho_{column}"] = float(spearmanr(log_curvature, even[column]).statistic)
    # the top 5 % of the evenly spaced draws by curvature: one shared stiff direction or many?
    magnitude = np.abs(curvature)
    curved = points.index[points["evenly_spaced"]][magnitude >= np.quantile(magnitude, 0.95)]
    row.update(shared_directions(directions[curved]))
    row["all_draws_mean_abs_cosine"] = shared_directions(
        directions[points.index[points["evenly_spaced"]]]
    ).get("top_directions_mean_abs_cosine", np.nan)
    starts = points[points["divergence_start"]]
    row["divergence_starts_measured"] = len(starts)
    if len(starts):
        row["h_percentile_at_divergence_starts"] = float(
            np.mean([(even["h"] < value).mean() for value in starts["h"]])
        )
        row["h_median_at_divergence_starts"] = float(starts["h"].median())
    return row


def plot(points: pd.DataFrame, path: Path) -> None:
    """h at the evenly spaced draws, one panel per activation and depth, one line per repeat,
    on a shared axis; divergent starts (where stored) filled red."""
    cells = list(points.groupby(["activation", "depth"], sort=True))
    figure, axes = pyplot().subplots(
        1, len(cells), figsize=(3.4 * len(cells), 3), squeeze=False, sharex=True
    )
    positive = points["h"][points["h"] > 0]
    bins = np.geomspace(positive.min(), positive.max() * 1.01, 40)
    for axis, ((activation, depth), cell) in zip(axes[0], cells, strict=True):
        for repeat, unit in cell.groupby("repeat"):
            axis.hist(unit["h"][unit["evenly_spaced"]], bins=bins, histtype="step",
                      label=f"repeat {repeat}")  # fmt: skip
        starts = cell[cell["divergence_start"]]
        if len(starts):
            axis.hist(starts["h"], bins=bins, color="tab:red", alpha=0.5,
                      label="divergence starts")  # fmt: skip
        axis.axvline(STABILITY_MARK, color="grey", linestyle=":")
        axis.set_xscale("log")
        axis.minorticks_off()
        ticks = [t for t in (0.01, 0.03, 0.1, 0.3, 1, 3, 10) if bins[0] <= t <= bins[-1]]
        axis.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
        axis.set_title(f"{activation}, depth {depth}", fontsize=9)
        axis.set_xlabel("h = eps sqrt(lambda_max / D)")
        axis.legend(fontsize=7)
    axes[0, 0].set_ylabel("draws")
    figure.tight_layout()
    save_figure(figure, path, dpi=120)


def run_curvature(
    run: Path, per_chain: int = 100, depths: set[int] | None = None, plot_only: bool = False
) -> None:
    """Write the curvature tables and figure of ``run``'s units (of ``depths`` only where
    given) at ``per_chain`` evenly spaced draws a chain; with ``plot_only``, redraw the figure
    from ``curvature_points.csv``."""
    if plot_only:
        plot(pd.read_csv(run / "curvature_points.csv"), run / "curvature.png")
        return
    rows, tables = [], []
    for record, arrays, chains in units_with_chains(run):
        if depths is not None and record["depth"] not in depths:
            continue
        if "chain_step_size" not in chains:  # NUTS: its step sizes are not stored
            print(f"{record['sampler']} unit (depth {record['depth']}): no step sizes, skipped")
            continue
        table, directions = measure_unit(record, arrays, chains, per_chain)
        rows.append(summarise(table, directions, record, chains))
        tables.append(table)
    if not rows:
        raise FileNotFoundError(f"{run}: no unit has its chains in samples/")
    summary = write_table(pd.DataFrame(rows), run / "curvature.csv")
    points = write_table(pd.concat(tables, ignore_index=True), run / "curvature_points.csv", "%.6g")
    plot(points, run / "curvature.png")
    print(summary.to_string(index=False, float_format=lambda value: f"{value:.3g}"))
