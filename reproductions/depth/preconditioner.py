"""Would a dense preconditioner make a deep unit's chains mix? ``preconditioner.csv`` beside a
depth run.

MAMS as the depth run uses it tunes a diagonal preconditioner; the deep units' posteriors are far
from diagonal (the correlation matrix of the ReLU depth-5 draws at 10,000 points has condition
number ~150 and 128 eigenvalues above 2), which is the paper's own subject. For one unit whose
chains are in ``<run>/samples``: the covariance of its pooled stored draws as a dense (or, with
``--rank``, low-rank-plus-diagonal) preconditioner (``vbnn.references.jax_mclmc.
low_rank_preconditioner``), and 4 MAMS chains with it from where the stored chains ended (their
last draws), tuned as ``mams_program`` tunes with a given preconditioner (eps at two steps a
transition, then L and eps), ``--samples`` draws each. Beside them, in the same table, the stored
chains' own last ``--samples`` draws: the diagonal sampler over as many draws from as far into
its run. Per row: R-hat, bulk and tail ESS (worst and median coordinate), the parameters with
R-hat > 1.05 or bulk ESS < 100, the sampling gradients and the worst coordinate's bulk ESS per
million of them, divergences, each chain's tuned eps and L, integration steps a transition and
acceptance. The preconditioned chains are kept in ``<run>/preconditioner/`` (their chain store
and ends): a killed run goes on where it stopped, and ``--samples`` larger goes on from their
ends.

Both kinds of rows start from chains that had run thousands of draws, but the preconditioned
ones are new chains tuned from there, and the preconditioner comes from the very draws they are
compared with: it is the sampler a second run would use after a first one, not a sampler from
scratch.

Run from the repository root: ``python reproductions/depth/preconditioner.py
reproductions/depth/mams-10000 --activation relu --depth 5``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.references.chain_diagnostics import bulk_ess, rank_rhat, summarise_chains
from vbnn.references.chain_runner import GRADIENTS_PER_STEP
from vbnn.references.jax_mclmc import low_rank_preconditioner, run_mams_chains
from vbnn.references.jax_potential import jax_potential
from vbnn_lab.depth.stored_chains import settings_of, units_with_chains
from vbnn_lab.depth.units import two_moons, unit_seed

SLOW_RHAT, SLOW_ESS = 1.05, 100.0  # the trust criterion's thresholds, per coordinate


def the_unit(run: Path, activation: str, depth: int, repeat: int) -> tuple[dict, dict, dict]:
    """(record, stored arrays, chain diagnostics) of the unit with the most stored draws."""
    found = [unit for unit in units_with_chains(run)
             if unit[0]["activation"] == activation and unit[0]["depth"] == depth
             and unit[0]["repeat"] == repeat]  # fmt: skip
    if not found:
        raise SystemExit(f"{run}: no stored chains of {activation} depth {depth} repeat {repeat}")
    return max(found, key=lambda unit: unit[0]["chain_draws"])


def row(label: str, draws: np.ndarray, log_density: np.ndarray, steps: np.ndarray,
        diverging: np.ndarray, step_size, length, accept: float) -> dict:  # fmt: skip
    """One row of the table from C chains' draws (C, N, D) and their per-draw arrays."""
    summary = summarise_chains(draws, log_density)
    slow = (rank_rhat(draws) > SLOW_RHAT) | (bulk_ess(draws) < SLOW_ESS)
    gradients = GRADIENTS_PER_STEP * float(steps.sum())
    return {
        "sampler": label,
        "draws": draws.shape[1],
        **summary,
        "slow_parameters": int(slow.sum()),
        "sampling_gradients": gradients,
        "bulk_ess_min_per_million_gradients": summary["bulk_ess_min"] / gradients * 1e6,
        "divergences": int(diverging.sum()),
        "steps_per_transition": float(steps.mean()),
        "accept": accept,
        "step_size_by_chain": " ".join(f"{s:.4g}" for s in np.ravel(step_size)),
        "trajectory_length_by_chain": " ".join(f"{v:.4g}" for v in np.ravel(length)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a depth run's output folder")
    parser.add_argument("--activation", default="relu", help="as in the unit table, e.g. relu")
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=0)
    parser.add_argument("--rank", type=int, default=None, help="low-rank part (default: dense)")
    parser.add_argument("--warmup", type=int, default=2000, help="tuning transitions a chain")
    parser.add_argument("--samples", type=int, default=1000, help="draws a chain")
    args = parser.parse_args()
    logging.basicConfig(format="vbnn: %(message)s")  # the chains' progress lines
    logging.getLogger("vbnn").setLevel(logging.INFO)
    record, arrays, chains = the_unit(args.run, args.activation, args.depth, args.repeat)
    settings = settings_of(record["settings"])
    draws = arrays["samples"]
    if args.samples > draws.shape[1]:
        raise SystemExit(f"--samples {args.samples}: the stored chains have {draws.shape[1]}")
    window = slice(draws.shape[1] - args.samples, None)
    rows = [row(
        f"diagonal (stored draws {window.start + 1}-{draws.shape[1]})", draws[:, window],
        arrays["log_density"][:, window], arrays["steps"][:, window],
        arrays["diverging"][:, window], chains["chain_step_size"],
        chains["chain_trajectory_length"], float(chains["accept_probability"]),
    )]  # fmt: skip
    preconditioner = low_rank_preconditioner(draws.reshape(-1, draws.shape[-1]), args.rank)
    rank = preconditioner.U.shape[1]
    seed = unit_seed(settings)
    x, y = two_moons(settings.points, settings.noise, seed, torch.float32)
    potential = jax_potential(settings.architecture(), x.numpy(), y.numpy())
    config = dataclasses.replace(
        settings.chains, warmup=args.warmup, samples=args.samples, seed=seed
    )
    out = args.run / "preconditioner"
    result = run_mams_chains(
        potential, np.ascontiguousarray(draws[:, -1]), config, out / "chains", out / "chain-ends",
        preconditioner,
    )  # fmt: skip
    d = result.diagnostics
    label = "dense" if rank == draws.shape[-1] else f"low rank {rank} + diagonal"
    rows.append(row(
        f"{label}, from the stored draws' covariance (new chains from their ends)",
        result.samples, result.log_density, result.leapfrog_steps, result.diverging,
        d["chain_step_size"], d["chain_trajectory_length"], d["accept_probability"],
    ))  # fmt: skip
    rows[-1]["tuning_gradients"] = d["gradient_evaluations"] - d["sampling_gradient_evaluations"]
    rows[-1]["chain_seconds"] = sum(d["chain_seconds"])
    table = pd.DataFrame(rows)
    unit = {"activation": record["activation"], "depth": record["depth"],
            "repeat": record["repeat"], "points": record["points"],
            "stored_draws": draws.shape[1], "rank": rank}  # fmt: skip
    table = pd.concat([pd.DataFrame([unit] * len(table)), table], axis=1)
    path = args.run / "preconditioner.csv"
    if path.is_file():  # keep the rows of other units, ranks and lengths
        old = pd.read_csv(path)
        same = (old[list(unit)] == pd.Series(unit)).all(axis=1) & old["draws"].eq(args.samples)
        table = pd.concat([old[~same], table], ignore_index=True)
    table.to_csv(path, index=False, float_format="%.6g")
    shown = ["sampler", "rhat_max", "bulk_ess_min", "tail_ess_min", "bulk_ess_median",
             "slow_parameters", "sampling_gradients", "bulk_ess_min_per_million_gradients",
             "divergences", "steps_per_transition", "accept"]  # fmt: skip
    print(table[table["draws"] == args.samples][shown].to_string(index=False))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
