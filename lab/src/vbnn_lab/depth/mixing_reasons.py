"""Why a depth run's chains do or do not mix: ``vbnn reproduce depth --mixing-reasons RUN``.

Writes ``mixing.csv``, ``mixing_layers.csv``, ``mixing_chains.csv`` and ``divergences.csv`` in
the run folder. For every unit of ``<run>/units`` whose chains are in ``<run>/samples``, the
measures of ``vbnn.references.mixing`` (slow parameters by layer, the rescaling ridge, units that
switch off, modes or drift, the logit at 16 test inputs) with each chain's tuned step size and
trajectory length; per chain (``mixing_chains.csv``), its tuned step and trajectory length, its
mean integration steps a transition and divergences, and the R-hat of the other chains without
it (``without_each_chain``: the chain whose removal brings R-hat down is the one holding the
others back); for units that stored which transitions diverged and had any, where those
transitions started (``divergence_locations``: one row per feature, with the number of
bursts). With ``--new``, only the units that have no rows yet in its tables (a unit taken on to
longer chains is a new one); the tables keep the rows of units whose chains are not here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.references.mixing import (
    divergence_episodes,
    divergence_locations,
    mixing_report,
    without_each_chain,
)
from vbnn_lab.depth.stored_chains import (
    TEST_INPUTS,
    measured_units,
    settings_of,
    unit_columns,
    units_with_chains,
    write_table,
)
from vbnn_lab.depth.units import two_moons, unit_seed

SHOWN = ["activation", "depth", "rhat_max", "bulk_ess_min", "slow_parameters",
         "rescaling_ess_min", "rescaling_rhat_max", "logit_ess_min", "logit_rhat_max",
         "switching_units", "off_share_spread", "between_over_within", "half_drift",
         "step_size_by_chain"]  # fmt: skip


def diagnose(record: dict, draws: np.ndarray, chains: dict) -> tuple[dict, list[dict]]:
    """One unit's row of ``mixing.csv`` and its rows of ``mixing_layers.csv``."""
    settings = settings_of(record["settings"])
    seed = unit_seed(settings)
    inputs, _ = two_moons(settings.points, settings.noise, seed, torch.float32)
    test, _ = two_moons(TEST_INPUTS, settings.noise, seed + 900_000, torch.float32)
    summary, layers = mixing_report(draws, settings.architecture(), inputs.numpy(), test.numpy())
    unit = unit_columns(record)
    row = {
        **unit, **summary, "rhat_log_density": chains.get("rhat_log_density", np.nan),
        "divergences": chains.get("divergences", np.nan),
        # tuned per chain by MAMS and MCLMC (a NUTS unit records neither: empty lists)
        "step_size_by_chain": json.dumps(
            [round(v, 4) for v in chains.get("chain_step_size", [])]),
        "trajectory_length_by_chain": json.dumps(
            [round(v, 3) for v in chains.get("chain_trajectory_length", [])]),
    }  # fmt: skip
    return row, [{**unit, **layer} for layer in layers]


def by_chain(record: dict, arrays: dict, chains: dict) -> list[dict]:
    """One unit's rows of ``mixing_chains.csv``: per chain its tuning, its integration steps and
    divergences, and the other chains' R-hat without it."""
    unit = unit_columns(record)
    steps, lengths = chains.get("chain_step_size", []), chains.get("chain_trajectory_length", [])
    rows = []
    for row in without_each_chain(arrays["samples"]):
        c = row["chain"]
        rows.append({
            **unit, "chain": c,
            "step_size": steps[c] if c < len(steps) else np.nan,
            "trajectory_length": lengths[c] if c < len(lengths) else np.nan,
            "steps_mean": float(arrays["steps"][c].mean()) if "steps" in arrays else np.nan,
            "divergences": int(arrays["diverging"][c].sum()) if "diverging" in arrays else np.nan,
            **{k: v for k, v in row.items() if k != "chain"},
        })  # fmt: skip
    return rows


def where_divergent(record: dict, arrays: dict) -> list[dict]:
    """One unit's rows of ``divergences.csv`` (none without stored divergences)."""
    if "diverging" not in arrays or not arrays["diverging"].any():
        return []
    sizes = settings_of(record["settings"]).architecture().sizes
    unit = unit_columns(record)
    episodes = divergence_episodes(arrays["diverging"])
    rows = divergence_locations(
        arrays["samples"], arrays["diverging"], arrays["log_density"], sizes
    )
    return [{**unit, "episodes": episodes, **row} for row in rows]


def run_mixing_reasons(run: Path, new: bool = False) -> None:
    """Write the mixing tables of ``run`` (with ``new``, of its units without rows yet) and
    print them."""
    units, layers, divergent, per_chain = [], [], [], []
    skip, chains_skip = set(), set()
    if new:  # a unit missing from either table is measured for that table
        skip = measured_units(run / "mixing.csv")
        chains_skip = measured_units(run / "mixing_chains.csv")
    for record, arrays, chains in units_with_chains(run, skip & chains_skip):
        key = tuple(unit_columns(record).values())
        if key not in skip:
            row, rows = diagnose(record, arrays["samples"], chains)
            units.append(row)
            layers.extend(rows)
            divergent.extend(where_divergent(record, arrays))
        if key not in chains_skip:
            per_chain.extend(by_chain(record, arrays, chains))
    if not units and not per_chain:
        if new:
            print(f"{run}: every unit with stored chains is in mixing.csv already")
            return
        raise FileNotFoundError(f"{run}: no unit with stored chains (in {run / 'samples'})")
    if per_chain:
        shown = write_table(pd.DataFrame(per_chain), run / "mixing_chains.csv")
        print(shown.to_string(index=False, float_format=lambda value: f"{value:.3g}"))
    if not units:
        return
    table = write_table(pd.DataFrame(units), run / "mixing.csv")
    write_table(pd.DataFrame(layers), run / "mixing_layers.csv")
    print(table[SHOWN].to_string(index=False, float_format=lambda value: f"{value:.3g}"))
    if divergent:
        starts = write_table(pd.DataFrame(divergent), run / "divergences.csv")
        print(starts.to_string(index=False, float_format=lambda value: f"{value:.3g}"))
