"""Does the gap above its floor depend on how many draws measured it? ``gap_by_draws.csv``.

For every unit of ``<run>/units`` whose chains are in ``<run>/samples``: KL(q_diag || q_full)
of the Gaussian fitted to the first ``n`` kept draws of each chain (n = 250, 500, 1000, ... up
to the chains' length), the chain floor of the same draws (every parameter's chains decoupled
from the others, ``kl_closest_diagonal_chain_null``), the independent-draw floor at that count
(``expected_kl_floor``), and the KL less the chain floor. A gap that is the posterior's own
should not move with ``n`` once the chains have mixed; a gap that falls with ``n`` is still
partly the estimator's.

Run from the repository root: ``python reproductions/depth/gap_by_draws.py
reproductions/depth/mams-1000-long``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from mixing_reasons import units_with_chains  # beside this script

from vbnn.references.gaussian_gap import (
    diagonal_gap,
    empirical_covariance,
    expected_kl_floor,
    kl_closest_diagonal_chain_null,
)


def gap_by_draws(samples: np.ndarray, jitter: float, seed: int) -> pd.DataFrame:
    """One row per prefix length n of the (C, N, D) chains: draws, KL, floors, KL above floor."""
    chains, length, dimension = samples.shape
    lengths = [n for n in (250, 500, 1000, 2000, 4000, 8000) if n < length] + [length]
    rows = []
    for n in lengths:
        prefix = samples[:, :n]
        _, covariance = empirical_covariance(prefix.reshape(-1, dimension), jitter)
        kl = diagonal_gap(covariance)["kl_diag_full"]
        floor = kl_closest_diagonal_chain_null(prefix, jitter, seed)
        independent = expected_kl_floor(dimension, chains * n) if chains * n > dimension else None
        rows.append({"per_chain": n, "draws": chains * n, "kl_diag_full": kl,
                     "kl_floor_chains": floor, "kl_floor": independent,
                     "kl_above_floor": kl - floor})  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a depth run's folder (units/, samples/)")
    run = parser.parse_args().run
    frames = []
    for record, draws, _ in units_with_chains(run):
        settings = record["settings"]
        seed = settings["seed"] * 1000 + settings["repeat"]  # compute_unit's
        frame = gap_by_draws(draws.astype(np.float64), settings["jitter"], seed)
        frame.insert(0, "depth", record["depth"])
        frame.insert(0, "activation", record["activation"])
        frames.append(frame)
    if not frames:
        raise SystemExit(f"{run}: no unit has its chains in samples/")
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(run / "gap_by_draws.csv", index=False)
    print(table.to_string(index=False, float_format="%.1f"))


if __name__ == "__main__":
    main()
