"""Why a depth run's chains do or do not mix: ``mixing.csv``, ``mixing_layers.csv``,
``mixing_chains.csv`` and ``divergences.csv`` beside it.

For every unit of ``<run>/units`` whose chains are in ``<run>/samples``, the measures of
``vbnn.references.mixing`` (slow parameters by layer, the rescaling ridge, units that switch off,
modes or drift, the logit at 16 test inputs) with each chain's tuned step size and trajectory
length; per chain (``mixing_chains.csv``), its tuned step and trajectory length, its mean
integration steps a transition and divergences, and the R-hat of the other chains without it
(``without_each_chain``: the chain whose removal brings R-hat down is the one holding the others
back); for units that stored which transitions diverged and had any, where those transitions
started (``divergence_locations``: one row per feature, with the number of bursts).

Run from the repository root: ``python reproductions/depth/mixing_reasons.py
reproductions/depth/mams-1000``; with ``--new``, only the units that have no rows yet in its
tables (a unit taken on to longer chains is a new one). A run's chains stay on the machine that
ran it (not in git: ~16 MB a unit for 4 x 1000 draws), so the tables keep the rows of units whose
chains are not here (``write_table``, which the other scripts beside this one use too).
"""

from __future__ import annotations

import argparse
import json
import zipfile
from collections.abc import Collection, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.references.jax_nuts import ChainsConfig
from vbnn.references.mixing import (
    divergence_episodes,
    divergence_locations,
    mixing_report,
    without_each_chain,
)
from vbnn_lab.depth.models import PretrainConfig
from vbnn_lab.depth.units import UnitSettings, two_moons, unit_seed

TEST_INPUTS = 16
SHOWN = ["activation", "depth", "rhat_max", "bulk_ess_min", "slow_parameters",
         "rescaling_ess_min", "rescaling_rhat_max", "logit_ess_min", "logit_rhat_max",
         "switching_units", "off_share_spread", "between_over_within", "half_drift",
         "step_size_by_chain"]  # fmt: skip


def settings_of(stored: dict) -> UnitSettings:
    """The unit's settings from its stored dict."""
    fields = {k: v for k, v in stored.items() if k not in ("pretrain", "chains")}
    chains = {k: v for k, v in stored["chains"].items() if k != "chain_method"}
    return UnitSettings(
        **fields, pretrain=PretrainConfig(**stored["pretrain"]), chains=ChainsConfig(**chains)
    )


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


# one unit of a run; ``chain_draws`` (draws a chain) tells a unit from the same one asked for more
UNIT_KEY = ["sampler", "points", "activation", "depth", "repeat", "chain_draws"]


def unit_columns(record: dict) -> dict:
    """The ``UNIT_KEY`` columns of a unit's record (as ``units_with_chains`` yields it)."""
    return {key: record[key] for key in UNIT_KEY}


def write_table(table: pd.DataFrame, path: Path, float_format: str | None = None) -> pd.DataFrame:
    """Write ``table`` to ``path`` with the rows already there of units that ``table`` does not
    measure (their chains may be on another machine: a run's chains are not in git); returns
    what it wrote. Units are told apart by the columns of ``UNIT_KEY`` the table has (and
    ``compared_with``)."""
    if path.is_file():
        old = pd.read_csv(path)
        key = [c for c in ["compared_with", *UNIT_KEY] if c in table.columns and c in old.columns]
        measured = pd.MultiIndex.from_frame(table[key].drop_duplicates())
        kept = old[~pd.MultiIndex.from_frame(old[key]).isin(measured)]
        table = pd.concat([kept, table], ignore_index=True)
        order = [c for c in UNIT_KEY if c in table.columns]
        table = table.sort_values(order, kind="stable", ignore_index=True)
    table.to_csv(path, index=False, float_format=float_format)
    return table


def stored_draws(path: Path) -> int:
    """Draws a chain of the stored chains ``path`` (an ``.npz``), read from the header of its
    ``samples`` array only."""
    with zipfile.ZipFile(path) as archive, archive.open("samples.npy") as stream:
        version = np.lib.format.read_magic(stream)
        read = {(1, 0): np.lib.format.read_array_header_1_0}.get(
            version, np.lib.format.read_array_header_2_0
        )
        shape = read(stream)[0]
    return int(shape[1])


def measured_units(table: Path, compared_with: str | None = None) -> set[tuple]:
    """The ``UNIT_KEY`` values of the units with rows in ``table`` (those compared with
    ``compared_with`` where given); none where it does not exist yet."""
    if not table.is_file():
        return set()
    rows = pd.read_csv(table)
    if compared_with is not None:
        rows = rows[rows["compared_with"] == compared_with]
    return set(rows[UNIT_KEY].itertuples(index=False, name=None))


def units_with_chains(run: Path, skip: Collection[tuple] = ()) -> Iterator[tuple[dict, dict, dict]]:
    """(record, stored arrays (``samples`` (C, N, D), ``log_density``, ...), chain diagnostics)
    of every unit of ``run/units`` whose chains are in ``run/samples`` and whose ``UNIT_KEY``
    values are not in ``skip`` (``measured_units``); says which it skips. The record gets
    ``chain_draws``, N."""
    for path in sorted((run / "units").glob("*.json")):
        stored = run / "samples" / path.name
        if not stored.is_file():
            print(f"{path.name}: no chains in {run / 'samples'}, skipped")
            continue
        info = json.loads(path.read_text())["info"]
        record = {**info, "chain_draws": stored_draws(stored.with_suffix(".npz"))}
        if tuple(unit_columns(record).values()) in skip:
            print(f"{path.name}: measured already, skipped")
            continue
        with np.load(stored.with_suffix(".npz")) as data:
            arrays = {key: data[key] for key in data.files}
        yield record, arrays, json.loads(stored.read_text())["info"]


NEW_HELP = "measure only the units that have no rows yet in the tables this writes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a depth run's output folder")
    parser.add_argument("--new", action="store_true", help=NEW_HELP)
    args = parser.parse_args()
    units, layers, divergent, per_chain = [], [], [], []
    skip, chains_skip = set(), set()
    if args.new:  # a unit missing from either table is measured for that table
        skip = measured_units(args.run / "mixing.csv")
        chains_skip = measured_units(args.run / "mixing_chains.csv")
    for record, arrays, chains in units_with_chains(args.run, skip & chains_skip):
        key = tuple(unit_columns(record).values())
        if key not in skip:
            row, rows = diagnose(record, arrays["samples"], chains)
            units.append(row)
            layers.extend(rows)
            divergent.extend(where_divergent(record, arrays))
        if key not in chains_skip:
            per_chain.extend(by_chain(record, arrays, chains))
    if not units and not per_chain:
        if args.new:
            print(f"{args.run}: every unit with stored chains is in mixing.csv already")
            return
        raise SystemExit(f"{args.run}: no unit with stored chains")
    if per_chain:
        shown = write_table(pd.DataFrame(per_chain), args.run / "mixing_chains.csv")
        print(shown.to_string(index=False, float_format=lambda value: f"{value:.3g}"))
    if not units:
        return
    table = write_table(pd.DataFrame(units), args.run / "mixing.csv")
    write_table(pd.DataFrame(layers), args.run / "mixing_layers.csv")
    print(table[SHOWN].to_string(index=False, float_format=lambda value: f"{value:.3g}"))
    if divergent:
        starts = write_table(pd.DataFrame(divergent), args.run / "divergences.csv")
        print(starts.to_string(index=False, float_format=lambda value: f"{value:.3g}"))


if __name__ == "__main__":
    main()
