"""Re-key the stored variance-networks units after the deterministic family became ``point``.

A stored unit's key is the hash of its settings, which hold the network's ``LeNetConfig`` as
text. The layers that were deterministic were stored as the family ``'deterministic'``
(binary dropout at rate 0); they are ``'point'`` layers now, which compute the same network
(the same weights and the same forward pass). This script rewrites the settings of every unit
under the given folders and renames its files (``.json``, ``.npz``, ``.checkpoint.pt``) to the
new key, so that a resumed run finds them. It changes no result.

    python reproductions/variance-networks/rekey_point_family.py reproductions/variance-networks
    python reproductions/variance-networks/rekey_point_family.py FOLDER --dry-run
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vbnn.stores.atomic import write_atomic
from vbnn.stores.unit_store import settings_key

OLD, NEW = "'deterministic'", "'point'"


def rekey(unit: Path, dry_run: bool) -> str | None:
    """Rewrite one unit's settings and rename its files; returns the new key, or None."""
    record = json.loads(unit.read_text())
    config = record["settings"].get("config")
    if not isinstance(config, str) or OLD not in config:
        return None
    if settings_key(record["settings"]) != unit.stem:
        raise ValueError(f"{unit}: its settings do not hash to its name; not a unit file")
    record["settings"]["config"] = config.replace(OLD, NEW)
    key = settings_key(record["settings"])
    if dry_run:
        return key
    for sibling in sorted(unit.parent.glob(f"{unit.stem}.*")):
        if sibling.suffix != ".json":
            sibling.rename(sibling.with_name(key + sibling.name[len(unit.stem) :]))
    write_atomic(unit.with_name(f"{key}.json"), json.dumps(record))  # the JSON last, as saved
    unit.unlink()
    return key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="print, rename nothing")
    args = parser.parse_args()
    for folder in args.folders:
        for unit in sorted(folder.rglob("*.json")):
            try:
                record = json.loads(unit.read_text())
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict) or "settings" not in record:
                continue
            key = rekey(unit, args.dry_run)
            if key is not None:
                print(f"{unit} -> {key}")


if __name__ == "__main__":
    main()
