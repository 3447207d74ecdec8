"""NUTS, MAMS and MCLMC side by side on the depth units: ESS per second, R-hat, trust, gap.

Every cell is one depth unit (``vbnn_lab.depth.units.compute_unit``: two moons, the
widest net of that depth with at most 1000 parameters, MFVI pre-training, 4 chains from the
pre-trained means plus N(0, 0.1^2) jitter, the gap KL(q_diag || q_full) of the pooled draws) with
one sampler (``vbnn.references.samplers``). The cells of one (activation, depth, points) share
the seed, hence the data, the MFVI fit and the jittered starts; only the sampler differs.

Per cell: wall seconds (pre-training, sampling with compilation, gaps), gradient evaluations,
bulk and tail ESS (minimum and median over parameters) and each per second of sampling,
largest R-hat, divergences, ``trusted`` (R-hat <= 1.05, bulk and tail ESS >= 100, no
divergence, and for MCLMC every chain's energy error variance per dimension <= 5e-3:
``ConvergenceCriterion()``), KL(q_diag || q_full) of all draws and of 1200 of
them with the estimator's floor at 1200 independent draws (the KL of a fixed posterior falls as
draws are added, so only equal draw counts compare), and the time of one gradient of
the potential (jit-compiled, mean of 50 calls) to say where the sampling time goes.

Budgets (``--nuts``, ``--mams``, ``--mclmc``: warm-up + kept draws per chain, and ``-large``
above 1000 points) count NUTS iterations, MAMS transitions, and MCLMC integrator steps (warm-up)
and draws one decoherence length apart (kept); the defaults give each sampler roughly the
gradient evaluations of NUTS's 300 + 300 iterations (~200 leapfrog steps each) at 1000 points.

Each cell runs in its own process with a time limit (``--cell-timeout``); a cell that runs out
is recorded as such, with its budget, and not retried. Finished cells are rows of
``--out`` (written atomically after each); re-running skips the cells already there, so the same
command resumes. Order: all cells at the first ``--points`` before any at the next, depth by
depth, and the samplers of one configuration one after the other.

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
      OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/depth_samplers.py
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd
import torch

from vbnn.core.contracts import Activation
from vbnn.references.chain_diagnostics import ConvergenceCriterion, bulk_ess, tail_ess
from vbnn.references.gaussian_gap import (
    empirical_covariance,
    kl_closest_diagonal,
    kl_closest_diagonal_null,
)
from vbnn.references.jax_nuts import ChainsConfig
from vbnn.references.jax_potential import jax_potential
from vbnn.references.samplers import Sampler
from vbnn.stores.atomic import write_atomic
from vbnn_lab.depth.models import PretrainConfig
from vbnn_lab.depth.units import UnitSettings, compute_unit, sampler_diagnostics, two_moons

GAP_DRAWS = 1200  # NUTS's 4 x 300: the KL's floor depends on the draws, so compare at this many
KEY = ["sampler", "activation", "depth", "points", "warmup", "samples", "max_tree_depth"]


def budgets(args: argparse.Namespace, sampler: Sampler, points: int) -> ChainsConfig:
    """Warm-up and kept draws per chain of ``sampler`` (NUTS: tree depth too) at ``points``."""
    large = points > 1000
    warmup, samples = {
        Sampler.NUTS: (args.nuts_large if large else args.nuts),
        Sampler.MAMS: (args.mams_large if large else args.mams),
        Sampler.MCLMC: (args.mclmc_large if large else args.mclmc),
    }[sampler]
    return ChainsConfig(
        chains=4,
        warmup=warmup,
        samples=samples,
        max_tree_depth=args.max_tree_depth,
        target_accept=0.9 if sampler is Sampler.MAMS else 0.8,
    )


def gradient_seconds(settings: UnitSettings, parameters: int, calls: int = 50) -> float:
    """Mean time of one jit-compiled value and gradient of the unit's potential."""
    x, y = two_moons(settings.points, settings.noise, settings.seed * 1000, torch.float32)
    potential = jax_potential(settings.architecture(), x.numpy(), y.numpy())
    gradient = jax.jit(jax.value_and_grad(potential))
    theta = np.full(parameters, 0.1, np.float32)
    jax.block_until_ready(gradient(theta))
    began = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(gradient(theta))
    return (time.perf_counter() - began) / calls


def equal_draw_gap(draws: np.ndarray, jitter: float, seed: int) -> dict[str, float]:
    """KL(q_diag || q_full) from ``GAP_DRAWS`` pooled draws (evenly spaced in every chain) and
    the estimator's floor at that many independent draws with the same marginal variances."""
    chains, length, dimension = draws.shape
    per_chain = min(length, GAP_DRAWS // chains)
    index = np.linspace(0, length - 1, per_chain).round().astype(int)
    pooled = draws[:, index].reshape(-1, dimension).astype(np.float64)
    _, covariance = empirical_covariance(pooled, jitter)
    return {
        "gap_draws": len(pooled),
        "kl_diag_full_equal_draws": kl_closest_diagonal(covariance),
        "kl_floor_equal_draws": kl_closest_diagonal_null(pooled.var(0), len(pooled), jitter, seed),
    }


def cell(settings: UnitSettings, moments: Path) -> dict[str, Any]:
    """One cell's row: the unit's record, its ESS per second and where its time went. The
    draws' per-parameter mean, variance and bulk ESS (and those of their squared deviations)
    go to ``moments`` (.npz), so the samplers' moments can be compared afterwards."""
    began = time.perf_counter()
    outcome = compute_unit(settings, None)
    wall = time.perf_counter() - began
    record, draws = outcome.record, outcome.samples["samples"]
    tail = tail_ess(draws)
    pooled = draws.reshape(-1, draws.shape[-1]).astype(np.float64)
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer, mean=pooled.mean(0), variance=pooled.var(0), bulk_ess=bulk_ess(draws),
        square_ess=bulk_ess((draws - pooled.mean(0)) ** 2),
        log_density=outcome.samples["log_density"],
    )  # fmt: skip
    write_atomic(moments, buffer.getvalue())
    chains = sampler_diagnostics(record)
    seconds = chains["seconds"]
    gradient = gradient_seconds(settings, record["parameters"])
    steps = outcome.samples["steps"]
    sampling_gradients = float(steps.sum()) * (1 if settings.sampler is Sampler.NUTS else 2)
    row = {
        "status": "finished",
        "parameters": record["parameters"],
        "wall_seconds": wall,
        "train_seconds": record["train_seconds"],
        "sampler_seconds": seconds,
        "gradient_ms": 1000 * gradient,
        "sampling_gradients": sampling_gradients,
        "gradients": chains.get("gradient_evaluations", np.nan),
        "bulk_ess_min": chains["bulk_ess_min"],
        "bulk_ess_median": chains["bulk_ess_median"],
        "tail_ess_min": 0.0 if np.isnan(tail).any() else float(tail.min()),  # NaN: constant
        "tail_ess_median": float(np.median(np.nan_to_num(tail))),
        "rhat_max": chains["rhat_max"],
        "divergences": chains["divergences"],
        "accept_probability": chains.get("accept_probability", np.nan),
        "steps_per_draw": float(steps.mean()),
        "step_size_mean": float(np.mean(chains.get("chain_step_size", np.nan))),
        "trajectory_length_mean": float(np.mean(chains.get("chain_trajectory_length", np.nan))),
        "trusted": ConvergenceCriterion().passes(chains),
        "kl_diag_full": record["kl_diag_full"],
        "log_density_mean": float(np.mean(outcome.samples["log_density"])),
        "energy_error_variance_per_dimension": float(
            np.mean(chains.get("chain_energy_error_variance_per_dimension", np.nan))
        ),
        **{name: chains.get(name, np.nan) for name in ENERGY_DETAIL},
        "energy_error_draws_above_5e_3_by_chain": " / ".join(
            f"{share:.3f}" for share in chains.get("chain_energy_error_draws_above_5e_3", [])
        ),
        "step_size_by_chain": " / ".join(f"{eps:.3g}" for eps in chains.get("chain_step_size", [])),
        **equal_draw_gap(draws, settings.jitter, settings.seed),
        "mean_field_test_accuracy": record["mean_field_test_accuracy"],
        "software": record["software"],
    }
    for name in ("bulk_ess_min", "bulk_ess_median", "tail_ess_min", "tail_ess_median"):
        row[f"{name}_per_second"] = row[name] / seconds
    return row


def _child(settings: UnitSettings, moments: Path, queue) -> None:
    queue.put(cell(settings, moments))


def run_with_limit(settings: UnitSettings, moments: Path, limit: float) -> dict[str, Any]:
    """``cell`` in a fresh process; a row saying so if it takes longer than ``limit`` s."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(settings, moments, queue))
    began = time.perf_counter()
    process.start()
    process.join(limit)
    if process.is_alive():
        process.kill()
        process.join()
        return {"status": f"stopped after {limit:.0f} s", "wall_seconds": limit}
    if queue.empty():
        return {"status": f"failed (exit code {process.exitcode})"}
    row = queue.get()
    row["cell_seconds"] = time.perf_counter() - began
    return row


def compare_moments(table: pd.DataFrame, folder: Path, reference: str = "nuts") -> pd.DataFrame:
    """Per configuration, each cell's per-parameter mean and variance against the ``reference``
    sampler's cell (its largest budget there), in standard errors from both cells' ESS: the
    largest |z| over parameters (about 3.3 for ~1000 parameters when the two agree), the median
    ratio of the variances and the difference of the mean log densities. A cell is named by its
    sampler and budget (warm-up + kept)."""
    rows = []
    finished = table[table["status"] == "finished"]
    for (activation, depth, points), group in finished.groupby(["activation", "depth", "points"]):
        cells = {
            (row.sampler, row.warmup + row.samples, f"{row.sampler} {row.warmup}+{row.samples}"):
            np.load(folder / ("_".join(str(row[k]) for k in KEY) + ".npz"))
            for _, row in group.iterrows()
        }  # fmt: skip
        candidates = [key for key in cells if key[0] == reference]
        if not candidates:
            continue
        base_key = max(candidates, key=lambda key: key[1])
        base = cells[base_key]
        for key, other in cells.items():
            if key == base_key:
                continue
            mean_error = other["variance"] / other["bulk_ess"] + base["variance"] / base["bulk_ess"]
            variance_error = (
                2 * other["variance"] ** 2 / other["square_ess"]
                + 2 * base["variance"] ** 2 / base["square_ess"]
            )
            mean_z = np.abs(other["mean"] - base["mean"]) / np.sqrt(mean_error)
            variance_z = np.abs(other["variance"] - base["variance"]) / np.sqrt(variance_error)
            rows.append(
                {
                    "activation": activation, "depth": depth, "points": points,
                    "cell": key[2], "reference": base_key[2],
                    "mean_z_max": float(mean_z.max()), "variance_z_max": float(variance_z.max()),
                    "variance_ratio_median": float(np.median(other["variance"] / base["variance"])),
                    "log_density_difference": float(
                        other["log_density"].mean() - base["log_density"].mean()
                    ),
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


# unadjusted MCLMC's energy error draw by draw (``vbnn.references.jax_mclmc``); NaN for the others
ENERGY_DETAIL = (
    "energy_error_variance_draw_median",
    "energy_error_variance_draw_max",
    "energy_error_variance_draws_above_5e_3",
    "log_density_at_worst_energy_error",
)


def verdict(row: Any) -> str:
    """The cell's trust verdict under today's ``ConvergenceCriterion()``. Rows written before
    the criterion checked unadjusted MCLMC's energy error carry the draws' verdict alone; their
    mean energy error over chains decides the rest (above the limit, the largest chain's is
    too; every stored row at or below it is a thousand times below, so its chains' are)."""
    limit = ConvergenceCriterion().max_energy_error_variance
    energy = row.energy_error_variance_per_dimension
    if row.trusted and limit is not None and np.isfinite(energy) and energy > limit:
        return f"no (energy error {energy:.3g})"
    return "yes" if row.trusted else "no"


def markdown_table(table: pd.DataFrame) -> str:
    """The README's table: one row per cell."""
    lines = [
        "| points | activation | depth | sampler | budget | wall s (sampler s) | gradients "
        "(ms each) | bulk ESS min / median | tail ESS min / median | bulk ESS/s min / median "
        "| tail ESS/s min / median | R-hat max | trusted | KL all draws | KL 1200 draws (floor) |",
        "|" + "---|" * 15,
    ]
    for _, row in table.iterrows():
        cell = (
            f"| {row.points} | {row.activation} | {row.depth} | {row.sampler} | "
            f"{row.warmup}+{row.samples} | "
        )
        if row.status != "finished":
            lines.append(cell + f"{row.status} |" + " |" * 10)
            continue
        gradients = row.gradients if np.isfinite(row.gradients) else row.sampling_gradients
        lines.append(
            cell + f"{row.wall_seconds:.0f} ({row.sampler_seconds:.0f}) | "
            f"{gradients / 1e6:.2f} M{'' if np.isfinite(row.gradients) else ' (sampling)'} "
            f"({row.gradient_ms:.2f}) | {row.bulk_ess_min:.0f} / {row.bulk_ess_median:.0f} | "
            f"{row.tail_ess_min:.0f} / {row.tail_ess_median:.0f} | "
            f"{row.bulk_ess_min_per_second:.2f} / {row.bulk_ess_median_per_second:.2f} | "
            f"{row.tail_ess_min_per_second:.2f} / {row.tail_ess_median_per_second:.2f} | "
            f"{row.rhat_max:.3f} | {verdict(row)} | {row.kl_diag_full:.0f} | "
            f"{row.kl_diag_full_equal_draws:.0f} ({row.kl_floor_equal_draws:.0f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samplers", default="mclmc,mams,nuts")
    parser.add_argument("--activations", default="relu,identity")
    parser.add_argument("--depths", default="1,3,5")
    parser.add_argument("--points", default="1000,10000")
    parser.add_argument("--max-tree-depth", type=int, default=8, help="NUTS tree, MAMS length")

    def pair(text: str) -> tuple[int, int]:
        warmup, samples = text.split("+")
        return int(warmup), int(samples)

    parser.add_argument("--nuts", type=pair, default=(300, 300), help="warm-up+samples")
    parser.add_argument("--mams", type=pair, default=(2000, 1000))
    parser.add_argument("--mclmc", type=pair, default=(20000, 1000))
    parser.add_argument("--nuts-large", type=pair, default=(150, 150), help="above 1000 points")
    parser.add_argument("--mams-large", type=pair, default=(1000, 500))
    parser.add_argument("--mclmc-large", type=pair, default=(10000, 500))
    parser.add_argument("--cell-timeout", type=float, default=3600.0, help="seconds a cell")
    parser.add_argument("--out", default="benchmarks/results/depth_samplers.csv")
    parser.add_argument("--compare", action="store_true", help="print the moments vs NUTS")
    parser.add_argument("--table", action="store_true", help="print the README's table")
    parser.add_argument(
        "--reference", default="nuts", help="--compare against this sampler's largest cell"
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.table:
        print(markdown_table(pd.read_csv(out)))
        return
    if args.compare:
        moments = out.parent / "depth_samplers_moments"
        table = compare_moments(pd.read_csv(out), moments, args.reference)
        print(table.to_string(index=False, float_format=lambda value: f"{value:.3g}"))
        return
    done = pd.read_csv(out) if out.is_file() else pd.DataFrame(columns=KEY)
    cells = [
        (Sampler(sampler), Activation(activation), int(depth), int(points))
        for points in args.points.split(",")
        for depth in args.depths.split(",")
        for activation in args.activations.split(",")
        for sampler in args.samplers.split(",")
    ]
    for sampler, activation, depth, points in cells:
        chains = budgets(args, sampler, points)
        key = {
            "sampler": sampler.value, "activation": activation.value, "depth": depth,
            "points": points, "warmup": chains.warmup, "samples": chains.samples,
            "max_tree_depth": chains.max_tree_depth,
        }  # fmt: skip
        if len(done) and (done[KEY] == pd.Series(key)).all(axis=1).any():
            continue
        settings = UnitSettings(
            activation=activation, depth=depth, repeat=0, points=points,
            pretrain=PretrainConfig(), chains=chains, sampler=sampler,
        )  # fmt: skip
        print(f"{key} ...", flush=True)
        name = "_".join(str(value) for value in key.values()) + ".npz"
        moments = out.parent / "depth_samplers_moments" / name  # compare_moments reads them
        row = {**key, **run_with_limit(settings, moments, args.cell_timeout)}
        print({k: row.get(k) for k in ("status", "wall_seconds", "bulk_ess_min", "rhat_max",
               "trusted", "kl_diag_full")}, flush=True)  # fmt: skip
        done = pd.concat([done, pd.DataFrame([row])], ignore_index=True)
        buffer = io.StringIO()
        done.to_csv(buffer, index=False)
        write_atomic(out, buffer.getvalue())


if __name__ == "__main__":
    main()
