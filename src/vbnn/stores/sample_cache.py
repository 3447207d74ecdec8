"""On-disk cache of sampler output keyed by the settings that made it.

Each entry is ``<directory>/<key>.npz`` (arrays) plus ``<directory>/<key>.json`` (the settings and
any scalar diagnostics), where ``key`` is the first 16 hex digits of the SHA-256 of the settings
serialised as sorted JSON. Both files are written to a temporary name and renamed, so a killed run
never leaves a half-written entry; a figure can be re-plotted from the cache without re-sampling.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from vbnn.stores.atomic import write_atomic


def settings_key(settings: dict[str, Any]) -> str:
    """16 hex digits identifying ``settings`` (must be JSON-serialisable)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save(
    directory: Path, settings: dict[str, Any], arrays: dict[str, np.ndarray], info: dict[str, Any]
) -> Path:
    """Store ``arrays`` and ``info`` under the key of ``settings``; returns the .npz path."""
    directory.mkdir(parents=True, exist_ok=True)
    key = settings_key(settings)
    npz = directory / f"{key}.npz"

    def write_arrays(path: Path) -> None:
        with path.open("wb") as handle:
            np.savez_compressed(handle, **arrays)

    write_atomic(npz, write_arrays)
    record = json.dumps({"settings": settings, "info": info}, indent=2, sort_keys=True, default=str)
    # the JSON goes last: an entry counts as present only when its JSON exists
    write_atomic(directory / f"{key}.json", record)
    return npz


def load(
    directory: Path, settings: dict[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The arrays and info stored for ``settings``, or None when absent."""
    key = settings_key(settings)
    record_path, npz = directory / f"{key}.json", directory / f"{key}.npz"
    if not (record_path.is_file() and npz.is_file()):
        return None
    record = json.loads(record_path.read_text())
    if record.get("settings") != json.loads(json.dumps(settings, default=str)):
        raise ValueError(f"sample cache {record_path}: stored settings differ from the key's")
    with np.load(npz) as data:
        arrays = {name: data[name] for name in data.files}
    return arrays, record["info"]
