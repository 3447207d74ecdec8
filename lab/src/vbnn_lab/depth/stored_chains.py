"""A depth run's stored chains, read back for the analysis commands, and their tables.

The analysis options of ``vbnn reproduce depth`` (``--mixing-reasons``, ``--gap-by-draws``,
``--compare-runs``, ``--curvature``) read the units of a run folder (``units/*.json``) whose
chains are still in its ``samples/`` (a run's chains stay on the machine that ran it: not in
git, ~16 MB a unit for 4 x 1000 draws), and write one table each beside the run. Each table
keeps the rows of the units whose chains are not here (``write_table``), so a folder's tables
grow as machines measure their own units.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Collection, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from vbnn.references.jax_nuts import ChainsConfig
from vbnn.stores.atomic import write_atomic
from vbnn_lab.depth.models import PretrainConfig
from vbnn_lab.depth.units import UnitSettings

TEST_INPUTS = 16  # the test inputs whose logits the mixing and agreement tables measure

# one unit of a run; ``chain_draws`` (draws a chain) tells a unit from the same one asked for more
UNIT_KEY = ["sampler", "points", "activation", "depth", "repeat", "chain_draws"]


def settings_of(stored: dict) -> UnitSettings:
    """The unit's settings from their stored dict (a record's ``settings``)."""
    fields = {k: v for k, v in stored.items() if k not in ("pretrain", "chains")}
    chains = {k: v for k, v in stored["chains"].items() if k != "chain_method"}
    return UnitSettings(
        **fields, pretrain=PretrainConfig(**stored["pretrain"]), chains=ChainsConfig(**chains)
    )


def unit_columns(record: dict) -> dict:
    """The ``UNIT_KEY`` columns of a unit's record (as ``units_with_chains`` yields it)."""
    return {key: record[key] for key in UNIT_KEY}


def write_table(table: pd.DataFrame, path: Path, float_format: str | None = None) -> pd.DataFrame:
    """Write ``table`` to ``path`` with the rows already there of units that ``table`` does not
    measure (their chains may be on another machine); returns what it wrote. Units are told
    apart by the columns of ``UNIT_KEY`` the table has (and ``compared_with``)."""
    if path.is_file():
        old = pd.read_csv(path)
        key = [c for c in ["compared_with", *UNIT_KEY] if c in table.columns and c in old.columns]
        measured = pd.MultiIndex.from_frame(table[key].drop_duplicates())
        kept = old[~pd.MultiIndex.from_frame(old[key]).isin(measured)]
        table = pd.concat([kept, table], ignore_index=True)
        order = [c for c in UNIT_KEY if c in table.columns]
        table = table.sort_values(order, kind="stable", ignore_index=True)
    write_atomic(path, table.to_csv(index=False, float_format=float_format))
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
    values are not in ``skip`` (``measured_units``); says on stdout which it skips. The record
    gets ``chain_draws``, N."""
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
