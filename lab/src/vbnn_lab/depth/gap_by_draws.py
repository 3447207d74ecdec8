"""Does the gap above its floor depend on how many draws measured it? ``vbnn reproduce depth
--gap-by-draws RUN``: ``gap_by_draws.csv``, ``gap_by_subset.csv`` and ``non_gaussian.csv`` in
the run folder.

For every unit of ``<run>/units`` whose chains are in ``<run>/samples``: KL(q_diag || q_full)
of the Gaussian fitted to the first ``n`` kept draws of each chain (n = 250, 500, 1000, ... up
to the chains' length), the chain floor of the same draws (every parameter's chains decoupled
from the others, ``kl_closest_diagonal_chain_null``), the independent-draw floor at that count
(``expected_kl_floor``), and the KL less the chain floor. A gap that is the posterior's own
should not move with ``n`` once the chains have mixed; a gap that falls with ``n`` is still
partly the estimator's.

What sets that excess, the number of draws or the length of the chains? ``gap_by_subset.csv``
measures the KL above its floor on the same unit's draws cut four ways: all of them, random
halves and quarters of the pooled draws (an independent-draws floor: every coordinate permuted
on its own), the first half of every chain, and every second draw of every chain. And are the
draws Gaussian-like, or do the parameters share a scale (``non_gaussian.csv``: the median excess
kurtosis of the parameters, and the mean correlation between squared standardised parameters)?
With ``--new``, only the units that have no rows yet in its tables.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vbnn.references.gaussian_gap import (
    empirical_covariance,
    expected_kl_floor,
    kl_closest_diagonal,
    kl_closest_diagonal_chain_null,
)
from vbnn_lab.depth.stored_chains import (
    measured_units,
    unit_columns,
    units_with_chains,
    write_table,
)


def _above(draws: np.ndarray, jitter: float, seed: int) -> dict[str, float]:
    """KL of the pooled (C, N, D) draws, their chain floor and the KL above it."""
    _, covariance = empirical_covariance(draws.reshape(-1, draws.shape[-1]), jitter)
    kl = kl_closest_diagonal(covariance)
    floor = kl_closest_diagonal_chain_null(draws, jitter, seed)
    return {"draws": draws.shape[0] * draws.shape[1], "kl_diag_full": kl,
            "floor": floor, "kl_above_floor": kl - floor}  # fmt: skip


def gap_by_draws(samples: np.ndarray, jitter: float, seed: int) -> pd.DataFrame:
    """One row per prefix length n of the (C, N, D) chains: draws, KL, floors, KL above floor."""
    chains, length, dimension = samples.shape
    lengths = [n for n in (250, 500, 1000, 2000, 4000, 8000) if n < length] + [length]
    rows = []
    for n in lengths:
        row = _above(samples[:, :n], jitter, seed)
        row["kl_floor_chains"] = row.pop("floor")
        independent = expected_kl_floor(dimension, chains * n) if chains * n > dimension else None
        rows.append({"per_chain": n, **row, "kl_floor": independent})
    return pd.DataFrame(rows)


def gap_by_subset(samples: np.ndarray, jitter: float, seed: int) -> pd.DataFrame:
    """The KL above its floor on all draws, random pooled halves and quarters (one chain of
    shuffled draws: the chain floor is then an independent-draws floor), the chains' first
    halves, and every second draw; also all draws against an independent-draws floor."""
    _, length, dimension = samples.shape
    pooled = samples.reshape(-1, dimension)
    shuffled = pooled[np.random.default_rng(seed).permutation(len(pooled))][None]
    cuts = {
        "all draws, chain floor": samples,
        "all draws, independent-draws floor": shuffled,
        "random half of the pooled draws": shuffled[:, : len(pooled) // 2],
        "random quarter of the pooled draws": shuffled[:, : len(pooled) // 4],
        "first half of every chain": samples[:, : length // 2],
        "every second draw of every chain": samples[:, ::2],
    }
    return pd.DataFrame([{"draws_from": name, **_above(cut, jitter, seed)}
                         for name, cut in cuts.items()])  # fmt: skip


def non_gaussian(samples: np.ndarray) -> pd.DataFrame:
    """Median excess kurtosis over parameters, and the mean over pairs of parameters of the
    correlation between their squared standardised values (zero without a shared scale)."""
    pooled = samples.reshape(-1, samples.shape[-1])
    standard = (pooled - pooled.mean(0)) / pooled.std(0)
    squares = np.corrcoef(standard**2, rowvar=False)
    pairs = ~np.eye(len(squares), dtype=bool)
    return pd.DataFrame([{
        "median_excess_kurtosis": float(np.median((standard**4).mean(0) - 3)),
        "mean_squares_correlation": float(squares[pairs].mean()),
    }])  # fmt: skip


def run_gap_by_draws(run: Path, new: bool = False) -> None:
    """Write the three tables of ``run`` (with ``new``, of its units without rows in
    ``gap_by_draws.csv`` yet) and print them."""
    measures = {"gap_by_draws": gap_by_draws, "gap_by_subset": gap_by_subset}
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in [*measures, "non_gaussian"]}
    skip = measured_units(run / "gap_by_draws.csv") if new else set()
    for record, arrays, _ in units_with_chains(run, skip):
        settings = record["settings"]
        seed = settings["seed"] * 1000 + settings["repeat"]  # compute_unit's
        draws = arrays["samples"].astype(np.float64)
        frames = {
            name: measure(draws, settings["jitter"], seed) for name, measure in measures.items()
        }
        frames["non_gaussian"] = non_gaussian(draws)
        for name, frame in frames.items():
            for key, value in reversed(unit_columns(record).items()):
                frame.insert(0, key, value)
            tables[name].append(frame)
    if not tables["gap_by_draws"]:
        if new:
            print(f"{run}: every unit with stored chains is in gap_by_draws.csv already")
            return
        raise FileNotFoundError(f"{run}: no unit has its chains in samples/")
    for name, parts in tables.items():
        table = write_table(pd.concat(parts, ignore_index=True), run / f"{name}.csv")
        print(table.to_string(index=False, float_format="%.4g"))
