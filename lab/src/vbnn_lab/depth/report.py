"""Running, tabulating and plotting the depth reproduction (see ``depth.py`` for the outputs)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from vbnn.diagnostics.product_covariance import (
    analytic_product_covariance,
    covariance_support,
    expected_support,
    flatten_covariance,
    monte_carlo_covariance,
    random_mean_field_layers,
    sample_products,
)
from vbnn.plots import pyplot, save_figure
from vbnn.references.chain_diagnostics import ConvergenceCriterion
from vbnn.references.gaussian_gap import draws_for_floor, expected_kl_floor
from vbnn.stores.atomic import write_atomic
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.executors import run_sweep
from vbnn_lab.depth.fashion_product import FashionProductConfig, run_fashion_product
from vbnn_lab.depth.local_product_figure import run_local_product_figure
from vbnn_lab.depth.units import (
    UnitOutcome,
    UnitSettings,
    chain_ends,
    chain_store,
    compute_unit,
    load_samples,
    run_unit,
    sampler_diagnostics,
    store_unit,
    stored_record,
)

HEATMAP_DEPTHS = (1, 5, 20)
FLOOR_SHARE = 0.10  # the floor is small once below this share of the KL above it
GAPS = {
    "kl_diag_full": "KL(q_diag || q_full)",
    "wasserstein2": "W2(q_diag, q_full)",
    "sample_w2_gap": "W2(HMC, q_diag) - W2(HMC, q_full)",
}


def _diverging_heatmap(axis: Any, matrix: np.ndarray, title: str) -> Any:
    limit = float(np.abs(matrix).max()) or 1.0
    image = axis.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit)
    axis.set_title(title, fontsize=9)
    axis.set_xticks([])
    axis.set_yticks([])
    return image


def _max_off_diagonal_correlation(covariance: torch.Tensor) -> float:
    scale = covariance.diagonal().sqrt()
    correlation = covariance / torch.outer(scale, scale)
    return float((correlation - torch.diag(correlation.diagonal())).abs().max())


def run_product_figure(out: Path, samples: int, seed: int) -> list[dict[str, Any]]:
    """Figure 1 of Farquhar et al. 2020 (Monte Carlo; 4x4 layers, means U(-0.1, 0.1), std 0.5),
    support check."""
    generator = torch.Generator().manual_seed(seed)
    figure, axes = pyplot().subplots(2, len(HEATMAP_DEPTHS), figsize=(11, 7))
    rows = []
    for column, depth in enumerate(HEATMAP_DEPTHS):
        means, stds = random_mean_field_layers(depth, 4, generator=generator)
        estimate, error = monte_carlo_covariance(sample_products(means, stds, samples, generator))
        exact = flatten_covariance(analytic_product_covariance(means, stds))
        for row, (matrix, kind) in enumerate(((estimate, "Monte Carlo"), (exact, "exact, eq. 14"))):
            title = f"product of {depth} layer(s), {kind}"
            image = _diverging_heatmap(axes[row, column], matrix.numpy(), title)
            figure.colorbar(image, ax=axes[row, column], fraction=0.046)
        support = covariance_support(exact)
        rows.append(
            {
                "depth": depth,
                "non_zero_pairs_analytic": float(support.double().mean()),
                "matches_expected_support": bool(
                    torch.equal(support, expected_support(depth, 4, 4))
                ),
                "max_abs_z_monte_carlo_vs_analytic": float(
                    ((estimate - exact).abs() / error).max()
                ),
                "max_abs_off_diagonal_correlation_exact": _max_off_diagonal_correlation(exact),
                "max_abs_off_diagonal_correlation_monte_carlo": _max_off_diagonal_correlation(
                    estimate
                ),
            }
        )
    figure.suptitle(
        f"Covariance of the 4x4 product matrix's 16 entries: {samples} Monte Carlo samples "
        "(top, Farquhar et al. 2020 Fig. 1) and the exact recursion (bottom)"
    )
    figure.tight_layout()
    save_figure(figure, out / "product_covariance.png", dpi=120)
    write_atomic(out / "product_support.csv", pd.DataFrame(rows).to_csv(index=False))
    return rows


def run_units(
    units: list[UnitSettings],
    out: Path,
    executor: ExecutorSettings | None = None,
    criterion: ConvergenceCriterion | None = None,
) -> list[dict[str, Any]]:
    """Every unit (cached ones are read back), with a progress bar on stderr; writes
    ``depth_units.csv``, one row per unit with its ``points``, ``sampler`` and whether its chains
    pass ``criterion`` (``trusted``; default ``ConvergenceCriterion()``).

    In worker processes or on Ray (``executor``), the missing units run there and return their
    numbers, and this process stores them; otherwise they run and are stored here, in order."""
    records = []
    if executor is not None and executor.kind is not ExecutorKind.LOCAL:
        shared_disk = executor.kind is ExecutorKind.PROCESSES  # where workers can keep chains

        def arguments(s: UnitSettings) -> tuple:
            """compute_unit's: the chain store and chain ends only where workers share the disk."""
            if not shared_disk:
                return (s, load_samples(s, out))
            return (s, load_samples(s, out), chain_store(s, out), False, chain_ends(out))

        missing = [
            Unit(f"{s.label()} depth {s.depth} repeat {s.repeat} {s.sampler.value}", compute_unit,
                 arguments(s), executor.cpus_per_unit)
            for s in units
            if stored_record(s, out) is None
        ]  # fmt: skip

        def store(unit: Unit, outcome: UnitOutcome) -> None:
            store_unit(unit.arguments[0], out, outcome)

        run_sweep(executor, missing, store, "depth units")  # the loop below reads them back
    bar = tqdm(total=len(units), desc="depth units", file=sys.stderr)
    for settings in units:
        records.append(run_unit(settings, out))
        bar.update()
    bar.close()
    flat = trusted_units(records, criterion or ConvergenceCriterion())
    write_atomic(out / "depth_units.csv", flat.to_csv(index=False))
    return records


def trusted_units(records: list[dict[str, Any]], criterion: ConvergenceCriterion) -> pd.DataFrame:
    """One row per unit with ``trusted``: its chains pass ``criterion`` (R-hat, bulk and tail
    ESS, divergences, and unadjusted MCLMC's energy error), and the estimator's floor
    (``estimator_floor``)."""
    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "settings"} for r in records])
    frame["trusted"] = [criterion.passes(sampler_diagnostics(r)) for r in records]
    return estimator_floor(frame, records)


def _draws(record: dict[str, Any]) -> float:
    """The pooled draws of a unit: stored since the floor was, else from its settings."""
    if "draws" in record:
        return float(record["draws"])
    chains = record.get("settings", {}).get("chains")
    return float(chains["chains"] * chains["samples"]) if chains else math.nan


def estimator_floor(frame: pd.DataFrame, records: list[dict[str, Any]]) -> pd.DataFrame:
    """Beside every unit's KL(q_diag || q_full), what the estimator reports with no correlation:

    * ``kl_floor``: its mean for as many independent draws (``expected_kl_floor``, closed form);
    * ``kl_floor_chains``: the unit's own chains with each parameter decoupled from the others
      (stored by ``compute_unit``; NaN for units stored before), higher, as autocorrelated
      draws are worth fewer independent ones;
    * ``kl_above_floor``: the KL less the chain floor, or less ``kl_floor`` where there is none
      (``floor``: which one);
    * ``kl_above_floor_limit``: the KL above the chain floor extrapolated to infinitely many
      draws (stored by ``compute_unit``, ``kl_above_floor_limit``; NaN without it): the
      posterior's gap, where ``kl_above_floor`` still holds a bias of order 1 / draws, and
      ``kl_above_floor_limit_drift``, how far it moves when extrapolated from half the draws;
    * ``draws_for_floor_10pc``: the fewest independent draws whose expected floor is at most
      ``FLOOR_SHARE`` of the gap (the limit where there is one, else ``kl_above_floor``; NaN
      where it is not positive).
    """
    frame = frame.copy()
    frame["draws"] = [_draws(record) for record in records]
    parameters = frame["parameters"] if "parameters" in frame else pd.Series(math.nan, frame.index)
    frame["kl_floor"] = [
        expected_kl_floor(int(p), int(n)) if n > p else math.nan  # NaN compares False
        for p, n in zip(parameters, frame["draws"], strict=True)
    ]
    for column in ("kl_floor_chains", "kl_above_floor_limit", "kl_above_floor_limit_drift"):
        if column not in frame:
            frame[column] = math.nan
    chains = frame["kl_floor_chains"].notna()
    frame["floor"] = np.where(chains, "chains", "independent draws")
    floor = frame["kl_floor_chains"].where(chains, frame["kl_floor"])
    frame["kl_above_floor"] = frame["kl_diag_full"] - floor
    limit = frame["kl_above_floor_limit"]
    gap = limit.where(limit.notna(), frame["kl_above_floor"])
    frame["draws_for_floor_10pc"] = [
        draws_for_floor(int(p), FLOOR_SHARE * value) if value > 0 else math.nan
        for p, value in zip(parameters, gap, strict=True)
    ]
    return frame


def aggregate(records: list[dict[str, Any]], criterion: ConvergenceCriterion) -> pd.DataFrame:
    """Per activation and depth: mean and SEM over all repeats, the number of trusted repeats,
    the gaps' mean and SEM over the trusted repeats only (NaN where none passed), and
    ``kl_above_floor_limit_error``, the limit's SEM and its units' root-mean-square drift
    (``estimator_floor``) added in quadrature."""
    frame = trusted_units(records, criterion)
    columns = [
        *GAPS,
        "kl_full_diag",
        "sampler_bulk_ess_min",
        "sampler_tail_ess_min",
        "sampler_rhat_max",
        "sampler_divergences",
        "sampler_max_tree_depth_hit_fraction",
        "sampler_seconds",
        "mean_field_test_accuracy",
        "sample_w2_full",
        "sample_w2_baseline",
    ]
    floors = [
        "kl_floor", "kl_floor_chains", "kl_above_floor", "kl_above_floor_limit",
        "draws_for_floor_10pc",
    ]  # fmt: skip
    grouped = frame.groupby(["activation", "depth"])
    table = grouped[columns + floors].mean().add_suffix("_mean")
    spread = [*GAPS, "kl_full_diag", "kl_above_floor", "kl_above_floor_limit"]
    sem = grouped[spread].sem().add_suffix("_sem")  # NaN with one repeat
    trusted = frame[frame["trusted"]].groupby(["activation", "depth"])
    kept = trusted[spread]
    table = table.join(sem).join(kept.mean().add_suffix("_trusted_mean"))
    table = table.join(kept.sem().add_suffix("_trusted_sem"))
    table = table.join(grouped["width"].first()).join(grouped.size().rename("repeats"))
    table = table.join(grouped["trusted"].sum().rename("trusted_repeats"))
    table["trusted"] = table["trusted_repeats"] == table["repeats"]
    # the limit's error bar: its SEM over repeats and its units' root-mean-square drift
    drift = (frame["kl_above_floor_limit_drift"] ** 2).groupby(
        [frame["activation"], frame["depth"]]
    )
    table["kl_above_floor_limit_error"] = np.hypot(
        table["kl_above_floor_limit_sem"].fillna(0.0), drift.mean() ** 0.5
    )
    return table.reset_index()


def doubtful_depths(table: pd.DataFrame) -> list[int]:
    """The depths of an ``aggregate`` table where no activation's repeats all pass the
    criterion: the region the figure shades."""
    anywhere = table.groupby("depth")["trusted"].any()
    return [int(depth) for depth in anywhere.index[~anywhere.to_numpy(dtype=bool)]]


def _gap_to_plot(rows: pd.DataFrame, gap: str) -> str:
    """The column the ``gap`` panel draws: above the floor, its limit where the units have it."""
    limit = "kl_above_floor_limit"
    return limit if gap == "kl_above_floor" and rows[f"{limit}_mean"].notna().any() else gap


def _error_bar(rows: pd.DataFrame, column: str) -> np.ndarray:
    """The SEM over repeats, or for the limit its ``aggregate`` error (SEM and drift)."""
    name = f"{column}_error" if column == "kl_above_floor_limit" else f"{column}_sem"
    return np.nan_to_num(rows[name].to_numpy())


def plot_depth_gap(table: pd.DataFrame, path: Path, quick: bool) -> None:
    """Farquhar et al. 2020 Fig. 2 (KL) and the blog's Wasserstein figure: gap vs depth over all
    repeats, SEM as error bars, and the KL above the estimator's floor (``estimator_floor``; the
    floor is dashed on the KL panel): its limit over draw counts with its ``aggregate`` error
    (SEM and drift), and dotted, its value at this run's draws. A point whose repeats' chains
    do not all pass the criterion is drawn hollow; a depth where no activation's do is shaded
    grey, as the paper shades its
    doubtful region (one activation that never mixes, such as a linear net, would otherwise
    shade every depth)."""
    panels = {**GAPS, "kl_above_floor": "KL(q_diag || q_full) above its floor"}
    figure, axes = pyplot().subplots(1, len(panels), figsize=(19, 4.2))
    for axis, (gap, label) in zip(axes, panels.items(), strict=True):
        for activation, rows in table.groupby("activation"):
            column = _gap_to_plot(rows, gap)
            mean = rows[f"{column}_mean"].to_numpy()
            error = _error_bar(rows, column)
            line = axis.errorbar(
                rows["depth"], mean, error, marker="o", capsize=3, label=activation
            )
            color = line[0].get_color()
            failed = ~rows["trusted"].to_numpy(dtype=bool)
            axis.scatter(
                rows["depth"].to_numpy()[failed], mean[failed], s=30, zorder=5,
                facecolors="white", edgecolors=color,
            )  # fmt: skip
            if gap == "kl_diag_full":
                chains = rows["kl_floor_chains_mean"]
                floor = chains.where(chains.notna(), rows["kl_floor_mean"])
                axis.plot(rows["depth"], floor, "--", color=color, linewidth=1)
            if column != gap:
                axis.plot(rows["depth"], rows[f"{gap}_mean"], ":", color=color, linewidth=1)
        for depth in doubtful_depths(table):
            axis.axvspan(depth - 0.5, depth + 0.5, color="grey", alpha=0.15, linewidth=0)
        axis.set_xticks(sorted(table["depth"].unique()))
        axis.set_xlabel("hidden layers")
        axis.set_ylabel(label)
        if gap in ("sample_w2_gap", "kl_above_floor"):  # differences of estimates: may be <= 0
            axis.axhline(0.0, color="black", linewidth=0.6)
        else:
            axis.set_yscale("log")
        axis.legend(fontsize=8)
    axes[0].set_title("dashed: the estimator's floor", fontsize=9)
    axes[-1].set_title("extrapolated to infinitely many draws; dotted: at this run's", fontsize=9)
    figure.suptitle(
        "Diagonal vs full-covariance Gaussian fitted to the reference chains"
        + (" (QUICK)" if quick else "")
    )
    figure.tight_layout()
    save_figure(figure, path, dpi=120)


def run_fashion(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The blog's Fashion-MNIST product-matrix heatmap."""
    config = (
        FashionProductConfig(epochs=1, train_size=10_000, samples=2_000, seed=args.seed)
        if args.quick
        else FashionProductConfig(seed=args.seed)
    )
    if args.fashion_images is not None or args.fashion_samples is not None:
        config = dataclasses.replace(
            config,
            train_size=args.fashion_images or config.train_size,
            samples=args.fashion_samples or config.samples,
        )
    result = run_fashion_product(config, args.data_dir)
    figure, axis = pyplot().subplots(figsize=(5.5, 4.8))
    image = _diverging_heatmap(
        axis,
        result["covariance"],
        f"{config.layers}-layer linear MF, Fashion-MNIST: Cov of product entries\n"
        f"({config.pixels} pixels x 10 classes, {config.samples} samples)",
    )
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    save_figure(figure, out / "fashion_product_covariance.png", dpi=120)
    covariance = result["covariance"]
    scale = np.sqrt(np.outer(np.diag(covariance), np.diag(covariance)))
    off_diagonal = ~np.eye(len(covariance), dtype=bool)
    record = {
        "config": config.__dict__,
        "pixels": result["pixels"].tolist(),
        "test_accuracy": result["test_accuracy"],
        "median_abs_off_diagonal_correlation": float(
            np.median(np.abs(covariance / scale)[off_diagonal])
        ),
    }
    write_atomic(out / "fashion_product.json", json.dumps(record, indent=2))
    record["local_product"] = run_local_product_figure(out, config, args.data_dir)
    return record


def write_summary(
    out: Path,
    args: argparse.Namespace,
    note: str,
    shared: dict[str, Any],
    results: dict[str, Any],
) -> None:
    """``out/summary.json``: the run's note, arguments and shared settings, then the
    ``results`` sections (product_support, gap_table, fashion) as given."""
    summary = {
        "quick": bool(args.quick),
        "note": note,
        # the parsed flags; not the subcommand's handler, whose address changes every run
        "arguments": {name: value for name, value in vars(args).items() if not callable(value)},
        "shared_settings": {
            k: (v.to_dict() if hasattr(v, "to_dict") else getattr(v, "__dict__", v))
            for k, v in shared.items()
        },
        **results,
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2, default=str))
