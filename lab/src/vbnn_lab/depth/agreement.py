"""Do two depth runs sample the same posterior? ``vbnn reproduce depth --compare-runs FIRST
[SECOND]``: ``agreement.csv`` in the second run's folder.

For every unit of the second run whose chains are in its ``samples/`` and that has a unit of the
first run with the same posterior (same activation, depth, repeat, data, prior and MFVI fit:
every setting but the sampler's), the two sets of draws are compared with
``vbnn.references.chain_diagnostics.moment_agreement``: per parameter, and per logit at 16 test
inputs, the difference of the means and of the variances in Monte Carlo standard errors (from
each run's ESS). Where both runs sample the posterior, every z is about N(0, 1): the largest
|z| over D coordinates stays near its median under agreement (``max_abs_normal_quantile``; 3.3
for 900 parameters) and rarely passes its 99 % quantile (4.4). A run that misses part of the
posterior, for example where its transitions diverge, shifts the moments it misses. Also: the
rank R-hat of all chains of both runs pooled, and the mean log density of each.

With one run only, ``agreement_within.csv``: in each unit with divergent transitions, the same
comparison between the chain that diverged most and the unit's other chains. With ``--new``,
only the units that have no rows yet in the table it writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.references.chain_diagnostics import (
    max_abs_normal_quantile,
    moment_agreement,
    rank_rhat,
)
from vbnn.references.mixing import network_outputs
from vbnn_lab.depth.stored_chains import (
    TEST_INPUTS,
    measured_units,
    settings_of,
    unit_columns,
    units_with_chains,
    write_table,
)
from vbnn_lab.depth.units import two_moons, unit_seed

SAMPLER_SETTINGS = ("sampler", "chains")  # what may differ between the compared units


def posterior_key(record: dict) -> str:
    """Every setting of a unit that fixes its posterior, as one comparable string."""
    settings = {k: v for k, v in record["settings"].items() if k not in SAMPLER_SETTINGS}
    return repr(sorted(settings.items()))


def agreement_rows(record: dict, first: dict, second: dict) -> dict:
    """One row of ``agreement.csv``: ``first`` and ``second`` are the units' stored arrays."""
    settings = settings_of(record["settings"])
    seed = unit_seed(settings)
    test, _ = two_moons(TEST_INPUTS, settings.noise, seed + 900_000, torch.float32)
    row = unit_columns(record)  # the second unit's
    for name, (a, b) in {
        "parameter": (first["samples"], second["samples"]),
        "logit": tuple(
            network_outputs(arrays["samples"], settings.architecture(), test.numpy())[0]
            for arrays in (first, second)
        ),
    }.items():
        agreement = moment_agreement(a, b)
        count = a.shape[-1]
        limit = max_abs_normal_quantile(count, 0.99)
        row.update(
            {
                f"{name}s": count,
                f"{name}_mean_z_max": float(np.nanmax(np.abs(agreement.mean_z))),
                f"{name}_variance_z_max": float(np.nanmax(np.abs(agreement.variance_z))),
                f"{name}_mean_z_sd": float(np.nanstd(agreement.mean_z)),
                # coordinates whose ESS could not be estimated (too few draws)
                f"{name}_z_undefined": int(
                    (np.isnan(agreement.mean_z) | np.isnan(agreement.variance_z)).sum()
                ),
                f"{name}_z_max_expected": max_abs_normal_quantile(count, 0.5),
                f"{name}_z_max_99": limit,
                f"{name}_mean_z_beyond_99": int((np.abs(agreement.mean_z) > limit).sum()),
                f"{name}_variance_z_beyond_99": int((np.abs(agreement.variance_z) > limit).sum()),
                f"{name}_variance_ratio_median": float(np.median(agreement.variance_ratio)),
                f"{name}_rhat_pooled_max": float(rank_rhat(np.concatenate([a, b], axis=0)).max()),
            }
        )
    density = moment_agreement(first["log_density"][..., None], second["log_density"][..., None])
    row.update(
        log_density_first=float(first["log_density"].mean()),
        log_density_second=float(second["log_density"].mean()),
        log_density_z=float(density.mean_z[0]),
        log_density_variance_z=float(density.variance_z[0]),
        divergences_first=int(first["diverging"].sum()) if "diverging" in first else np.nan,
        divergences_second=int(second["diverging"].sum()) if "diverging" in second else np.nan,
    )
    return row


def chain_against_the_rest(arrays: dict) -> tuple[dict, dict] | None:
    """(the chain with the most divergent transitions, the other chains) of a unit's stored
    arrays; None without divergences."""
    if "diverging" not in arrays or not arrays["diverging"].any():
        return None
    worst = int(arrays["diverging"].sum(axis=1).argmax())
    rest = [c for c in range(len(arrays["samples"])) if c != worst]
    keys = ("samples", "log_density", "diverging")
    return {k: arrays[k][[worst]] for k in keys}, {k: arrays[k][rest] for k in keys}


def within(run: Path, new: bool = False) -> None:
    """``agreement_within.csv``: in every unit with divergent transitions, the chain with the
    most of them against the other chains (first = that chain); with ``new``, of the units that
    have no row there yet."""
    rows = []
    skip = measured_units(run / "agreement_within.csv") if new else set()
    for record, arrays, _ in units_with_chains(run, skip):
        split = chain_against_the_rest(arrays)
        if split is not None:
            rows.append({"compared_with": "most divergent chain", **agreement_rows(record, *split)})
    if not rows:
        if new:
            print(f"{run}: no unit with chains and divergent transitions to add")
            return
        raise FileNotFoundError(f"{run}: no unit with chains and divergent transitions")
    table = write_table(pd.DataFrame(rows), run / "agreement_within.csv")
    print(table.T.to_string(header=False, float_format=lambda value: f"{value:.4g}"))


def compare_runs(first: Path, second: Path | None = None, new: bool = False) -> None:
    """``agreement.csv`` in ``second``: its units against those of ``first`` with the same
    posterior; without ``second``, ``within(first, new)``. With ``new``, only the units of
    ``second`` without a row compared with ``first`` yet."""
    if second is None:
        within(first, new)
        return
    reference = {posterior_key(record): arrays for record, arrays, _ in units_with_chains(first)}
    rows = []
    skip = measured_units(second / "agreement.csv", compared_with=first.name) if new else set()
    for record, arrays, _ in units_with_chains(second, skip):
        key = posterior_key(record)
        if key not in reference:
            print(f"{record['activation']} depth {record['depth']}: not in {first}, skipped")
            continue
        rows.append({"compared_with": first.name, **agreement_rows(record, reference[key], arrays)})
    if not rows:
        if new:
            print(f"{second}: no unit to add to agreement.csv")
            return
        raise FileNotFoundError(f"{second}: no unit with chains shares a posterior with {first}")
    table = write_table(pd.DataFrame(rows), second / "agreement.csv")
    print(table.T.to_string(header=False, float_format=lambda value: f"{value:.4g}"))
