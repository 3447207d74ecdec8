"""Bring stored results up to the current key version: ``python -m vbnn.migrate PATH...``.

vbnn never matches an old key by a special case: a results database or unit store of another key
version is refused with a message naming this command (``results_db.KEY_VERSION``,
``unit_store.KEY_VERSION``, ``saved_models.FORMAT_VERSION``). A PATH may be a results database
(``*.sqlite``), a saved model folder (``model.json``), a unit-store directory, or a folder that
holds any of these (searched recursively). Each file is rewritten in place; nothing is trained.

What version 1 -> 2 changed (this module is where that history lives):

* UCI runs: FC runs of the factor L = diag(s) + A (stored before FC named its factor) have no
  current config, and a configuration stored twice (under two older keys) has one current key,
  which the newest run keeps; the others move to the table ``superseded_runs`` of the same file,
  with the reason.
  Every other run: one config per algorithm (``core.runs``) replaced the one ``TrainConfig``
  with every algorithm's fields, so a run's stored hyper-parameters (and its hash) hold only its
  algorithm's fields and name the algorithm; ``method="vi"`` with ``family`` became the family
  name; ``cholesky_learning_rate`` became ``correlation_learning_rate``; ``covariance_factor``
  ("scaled-unit", FC's only factor) went. Optuna studies are named
  ``{data}/split{k}/{method}/hidden{widths}/seed{s}`` (before: the hidden widths only when not
  50, and suffixes ``/scaled-unit`` for FC and ``/step-size`` for SGLD; the studies without
  them searched what vbnn no longer runs and are renamed ``superseded/...``).
* Unit stores: the key hashes the key version with the settings. Depth units of the Pyro NUTS
  era (settings ``nuts`` instead of ``chains``) have no current settings and stay as they are.
  Depth units always name their sampler (NUTS units left it out) and their records carry
  ``points`` and ``sampler``;
  variance-network runs always name their device (CPU runs left it out) and their networks'
  deterministic layers ``point`` (they said ``deterministic``); the depth units' mean-field
  pretraining names its initial std ``init_std`` (it said ``posterior_std``); exploration cells
  always name their baseline (``episode`` cells left it out).
* Saved models: format version 3 holds the per-algorithm config.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vbnn.core.runs import TrainConfig
from vbnn.regression import saved_models
from vbnn.regression.methods import config_class
from vbnn.regression.tuning import hidden_label
from vbnn.stores import unit_store
from vbnn.stores.atomic import write_atomic
from vbnn.stores.results_db import KEY_VERSION, META_SCHEMA, config_dict, config_hash

RENAMED_FIELDS = {"cholesky_learning_rate": "correlation_learning_rate"}
SUPERSEDED_TABLE = "superseded_runs"


class SupersededRun(ValueError):
    """A stored run of something vbnn no longer implements: it has no current key."""


OLD_STUDY = re.compile(
    r"^(?P<data>[^/]+)/split(?P<split>\d+)/(?P<method>[^/]+)/seed(?P<seed>\d+)"
    r"(?:/hidden(?P<hidden>[0-9x]+))?(?P<factor>/scaled-unit)?(?P<step>/step-size)?$"
)


def legacy_config(values: dict[str, Any]) -> TrainConfig:
    """The config of a version-1 ``TrainConfig.to_dict``: the fields its algorithm takes.

    Raises:
        SupersededRun: an FC run of the Cholesky factor L = diag(s) + A ("direct"; stored
            before FC named its factor), which vbnn no longer implements.
    """
    values = {RENAMED_FIELDS.get(k, k): v for k, v in values.items()}
    method = values.pop("method")
    family = values.pop("family", None)
    factor = values.pop("covariance_factor", "direct" if method == "fc" else None)
    if factor == "direct":
        raise SupersededRun("FC with the factor L = diag(s) + A, no longer implemented")
    name = family if method == "vi" else method
    cls = config_class(name)
    fields = set(cls.__dataclass_fields__)
    kept = {k: v for k, v in values.items() if k in fields}
    if "family" in fields:
        kept["family"] = name
    for key in ("hidden", "betas"):
        if key in kept:
            kept[key] = tuple(kept[key])
    return cls(**kept)


def new_study_name(name: str) -> str | None:
    """The version-2 name of a version-1 study name (None: not a vbnn study name). A search of
    what vbnn no longer runs (FC's "direct" factor, named without ``/scaled-unit``; SGLD's prior
    std alone, without ``/step-size``) is kept as ``superseded/{name}``, which nothing resumes."""
    match = OLD_STUDY.match(name)
    if match is None:
        return None
    method = match["method"].removeprefix("vi-")
    if (method == "fc" and not match["factor"]) or (method == "sgld" and not match["step"]):
        return f"superseded/{name}"
    hidden = match["hidden"] or hidden_label((50,))
    return f"{match['data']}/split{match['split']}/{method}/hidden{hidden}/seed{match['seed']}"


def migrate_database(path: Path) -> str:
    """Re-key the runs and rename the studies of a version-1 results database."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute(META_SCHEMA)
        row = connection.execute("SELECT value FROM vbnn_meta WHERE name='key_version'").fetchone()
        if row is not None and int(row[0]) == KEY_VERSION:
            return f"{path}: already key version {KEY_VERSION}"
        connection.execute("BEGIN IMMEDIATE")
        runs = connection.execute(
            "SELECT id, dataset, split, seed, hyperparameters FROM runs ORDER BY created_at DESC, "
            "id DESC"
        ).fetchall()
        updated, superseded, keys = 0, 0, set()
        for run_id, dataset, split, seed, text in runs:  # the newest first
            values = json.loads(text)
            if "method" not in values:  # not a UCI-engine run (a comparison's classifier)
                continue
            extra = values.pop("extra", None)
            try:
                config = legacy_config(values)
            except SupersededRun as reason:
                _set_aside(connection, run_id, str(reason))
                superseded += 1
                continue
            key = (dataset, split, config.method, config_hash(config, extra), seed)
            if key in keys:  # one configuration stored twice under two older keys
                _set_aside(connection, run_id, "an earlier run of the same configuration")
                superseded += 1
                continue
            keys.add(key)
            stored = config_dict(config)
            if extra:
                stored["extra"] = extra
            connection.execute(
                "UPDATE runs SET method=?, config_hash=?, hyperparameters=? WHERE id=?",
                (config.method, config_hash(config, extra), json.dumps(stored, sort_keys=True),
                 run_id),
            )  # fmt: skip
            updated += 1
        tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master")}
        renamed = 0
        if "studies" in tables:
            for study_id, name in connection.execute(
                "SELECT study_id, study_name FROM studies"
            ).fetchall():
                new = new_study_name(name)
                if new is not None and new != name:
                    connection.execute(
                        "UPDATE studies SET study_name=? WHERE study_id=?", (new, study_id)
                    )
                    renamed += 1
        connection.execute(
            "INSERT OR REPLACE INTO vbnn_meta (name, value) VALUES ('key_version', ?)",
            (str(KEY_VERSION),),
        )
        connection.execute("COMMIT")
    except Exception:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    finally:
        connection.close()
    aside = f", {superseded} superseded runs moved to {SUPERSEDED_TABLE}" if superseded else ""
    return f"{path}: {updated} runs re-keyed, {renamed} studies renamed{aside}"


def _set_aside(connection: sqlite3.Connection, run_id: int, reason: str) -> None:
    """Move a run that has no current key out of ``runs`` into ``SUPERSEDED_TABLE`` (kept for
    the record, with the reason)."""
    connection.execute(
        f"CREATE TABLE IF NOT EXISTS {SUPERSEDED_TABLE} AS SELECT *, '' AS reason FROM runs WHERE 0"
    )
    connection.execute(
        f"INSERT INTO {SUPERSEDED_TABLE} SELECT *, ? FROM runs WHERE id=?", (reason, run_id)
    )
    connection.execute("DELETE FROM runs WHERE id=?", (run_id,))


def _unit_settings(settings: dict[str, Any], info: dict[str, Any]) -> None:
    """Version 1 -> 2 of one unit's settings and record, in place."""
    if {"depth", "chains", "pretrain"} <= set(settings):  # a depth unit
        settings.setdefault("sampler", "nuts")
        pretrain = settings["pretrain"]
        if "posterior_std" in pretrain:  # the mean-field pretraining's initial std
            pretrain["init_std"] = pretrain.pop("posterior_std")
        info.setdefault("points", settings.get("points"))
        info.setdefault("sampler", settings["sampler"])
    if {"environment", "policy", "seeds"} <= set(settings):  # an exploration cell
        settings.setdefault("baseline", "episode")  # cells stored before the option existed
    if {"name", "budget", "config", "seed"} <= set(settings):  # a variance-network run
        settings.setdefault("device", "cpu")
        # the one deterministic family is named "point" (it was "deterministic")
        settings["config"] = settings["config"].replace("'deterministic'", "'point'")


def migrate_unit_store(directory: Path) -> str:
    """Re-key every version-1 unit of ``directory`` (its JSON, arrays and checkpoint)."""
    moved, left = 0, 0
    for record_path in sorted(directory.glob("*.json")):
        record = json.loads(record_path.read_text())
        if not isinstance(record, dict) or "settings" not in record:
            continue
        if record.get("key_version", 1) == unit_store.KEY_VERSION:
            continue
        settings = record["settings"]
        if {"depth", "nuts"} <= set(settings):  # a depth unit of the Pyro sampler: no current
            left += 1  # settings describe it, so it stays as it is (and reads as stale)
            continue
        _unit_settings(settings, record["info"])
        key = unit_store.settings_key(settings)
        old = record_path.stem
        for suffix in (".npz", ".checkpoint.pt"):
            source = directory / f"{old}{suffix}"
            if source.is_file():
                source.replace(directory / f"{key}{suffix}")
        record.update(settings=settings, key_version=unit_store.KEY_VERSION)
        text = json.dumps(record, indent=2, sort_keys=True, default=str)
        write_atomic(directory / f"{key}.json", text)
        if key != old:
            record_path.unlink()
        moved += 1
    unit_store._stale_units.cache_clear()
    kept = f", {left} units of a superseded schema left as they are" if left else ""
    return f"{directory}: {moved} units re-keyed{kept}"


def migrate_saved_model(folder: Path) -> str:
    """Rewrite a saved model's ``model.json`` with the per-algorithm config."""
    path = folder / saved_models.CONFIG_FILE
    description = json.loads(path.read_text())
    if description.get("format_version") == saved_models.FORMAT_VERSION:
        return f"{folder}: already format {saved_models.FORMAT_VERSION}"
    description["config"] = legacy_config(description["config"]).to_dict()
    description["format_version"] = saved_models.FORMAT_VERSION
    write_atomic(path, json.dumps(description, indent=2, sort_keys=True))
    return f"{folder}: model.json rewritten"


def _targets(path: Path) -> list[tuple[Callable[[Path], str], Path]]:
    if path.is_file() and path.suffix == ".sqlite":
        return [(migrate_database, path)]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a results database (*.sqlite) or a folder")
    if (path / saved_models.CONFIG_FILE).is_file():
        return [(migrate_saved_model, path)]
    found: list[tuple[Callable[[Path], str], Path]] = []
    if any(path.glob("*.json")):
        found.append((migrate_unit_store, path))
    found += [(migrate_database, p) for p in sorted(path.glob("*.sqlite"))]
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        found += _targets(child)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vbnn.migrate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    for path in args.paths:
        for migrate, target in _targets(path):
            print(migrate(target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
