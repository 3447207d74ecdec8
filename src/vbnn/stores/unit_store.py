"""Finished units of work on disk, keyed by the settings that made them: how runs resume.

A unit (a NUTS chain, a trained network, one cell of an experiment) is stored as
``<directory>/<key>.json`` holding ``{"settings": ..., "info": ...}`` (the settings and any
JSON-serialisable result) and, when it has arrays (samples, a state dict), as
``<directory>/<key>.npz`` too. ``key`` is the first 16 hex digits of the SHA-256 of the settings as
sorted JSON, with the version of this key scheme (``KEY_VERSION``). A unit stored under another
version is never read as this one's: a directory that holds such units is reported, and ``python -m
vbnn.migrate DIRECTORY`` re-keys them. Every file is written by ``atomic.write_atomic`` and the JSON
goes last, so a unit exists only when complete: a killed run loses the unit in flight and nothing
else, and re-running the same command skips every stored unit. (UCI runs resume through the results
database instead, where they sit beside the Optuna studies that tuned them.)

Processes on one machine can share a directory's units: ``claim`` marks a unit as being computed
(``<key>.claim`` holds the host and process id), so that another process computes a different
one instead of the same one twice; a claim whose process has ended is taken over."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from vbnn.stores.atomic import write_atomic

Arrays = dict[str, np.ndarray]
# Raise with every change of what a unit's settings hold, and teach ``vbnn.migrate`` the change.
KEY_VERSION = 2


class StaleUnitsError(ValueError):
    """A directory holds units keyed under another key version (it names the directory)."""


def settings_key(settings: dict[str, Any]) -> str:
    """16 hex digits identifying ``settings`` (must be JSON-serialisable) under ``KEY_VERSION``."""
    text = json.dumps({"key_version": KEY_VERSION, "settings": settings}, sort_keys=True,
                      default=str)  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save(
    directory: Path, settings: dict[str, Any], arrays: Arrays | None, info: dict[str, Any]
) -> Path:
    """Store ``info`` (and ``arrays``, if any) under the key of ``settings``; returns the JSON."""
    key = settings_key(settings)
    if arrays is not None:

        def write_arrays(path: Path) -> None:
            with path.open("wb") as handle:
                np.savez_compressed(handle, **arrays)

        write_atomic(Path(directory) / f"{key}.npz", write_arrays)
    record = {
        "settings": settings, "info": info, "arrays": arrays is not None,
        "key_version": KEY_VERSION,
    }  # fmt: skip
    text = json.dumps(record, indent=2, sort_keys=True, default=str)
    return write_atomic(Path(directory) / f"{key}.json", text)  # last: the unit is complete


def load(directory: Path, settings: dict[str, Any]) -> tuple[Arrays | None, dict[str, Any]] | None:
    """(arrays or None, info) stored for ``settings``, or None when the unit is not stored.

    Raises:
        ValueError: the stored settings differ from ``settings`` (a key collision or an edit),
            or the unit's arrays are missing; the message names the file.
        StaleUnitsError: the unit is not stored, and ``directory`` holds units of another key
            version (migrate them rather than compute them again).
    """
    found = _record(directory, settings)
    if found is None:
        return None
    record_path, record = found
    if not record.get("arrays", True):
        return None, record["info"]
    npz = record_path.with_suffix(".npz")
    if not npz.is_file():
        raise ValueError(f"unit store {record_path}: its arrays {npz.name} are missing")
    with np.load(npz) as data:
        arrays = {name: data[name] for name in data.files}
    return arrays, record["info"]


def load_info(directory: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The info stored for ``settings``, without reading its arrays; None when the unit is not
    stored. Raises ``load``'s errors, but for missing arrays."""
    found = _record(directory, settings)
    return None if found is None else found[1]["info"]


def _record(directory: Path, settings: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """(path, record) of the unit of ``settings``, or None when it is not stored (``load``)."""
    record_path = Path(directory) / f"{settings_key(settings)}.json"
    if not record_path.is_file():
        stale = _stale_units(Path(directory).resolve())
        if stale:
            raise StaleUnitsError(
                f"{directory}: {stale} stored unit(s) are keyed by an older vbnn (key version "
                f"other than {KEY_VERSION}); re-key them with `python -m vbnn.migrate "
                f"{directory}`, or move them aside to compute them anew"
            )
        return None
    record = json.loads(record_path.read_text())
    if record.get("settings") != json.loads(json.dumps(settings, default=str)):
        raise ValueError(f"unit store {record_path}: stored settings differ from the key's")
    return record_path, record


def claim(directory: Path, settings: dict[str, Any]) -> bool:
    """Mark the unit of ``settings`` as computed by this process: True if it now holds the claim
    (or held it), False if a process that is alive, or one on another host (which cannot be
    checked), holds it. A claim of an ended process on this host is taken over. Two processes
    that take over the same dead claim at once may both compute the unit: the store stays whole
    (every write is atomic), only the time is spent twice."""
    path = Path(directory) / f"{settings_key(settings)}.claim"
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _claimed_elsewhere(path):
                return False
            path.unlink(missing_ok=True)  # its process has ended
            continue
        with os.fdopen(handle, "w") as file:
            file.write(f"{socket.gethostname()} {os.getpid()}")
        return True
    return False


def remove(directory: Path, settings: dict[str, Any]) -> None:
    """Delete the unit of ``settings`` (none is fine): its record first, so that a kill between
    the two files leaves no unit rather than one whose arrays are missing."""
    key = settings_key(settings)
    for suffix in (".json", ".npz"):
        (Path(directory) / f"{key}{suffix}").unlink(missing_ok=True)


def claimed(directory: Path, settings: dict[str, Any]) -> bool:
    """Whether another process that may still run holds the claim on the unit of ``settings``
    (one on another host always may: it cannot be checked from here)."""
    return _claimed_elsewhere(Path(directory) / f"{settings_key(settings)}.claim")


def release(directory: Path, settings: dict[str, Any]) -> None:
    """Drop this process's claim on the unit of ``settings`` (none is fine)."""
    (Path(directory) / f"{settings_key(settings)}.claim").unlink(missing_ok=True)


def _claimed_elsewhere(path: Path) -> bool:
    """Whether the claim at ``path`` belongs to another process that may still run."""
    try:
        host, pid = path.read_text().split()
    except FileNotFoundError:
        return False
    except ValueError:  # being written, or left empty by a kill: give it a minute
        return time.time() - path.stat().st_mtime < 60
    if host != socket.gethostname():
        return True
    if int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@cache
def _stale_units(directory: Path) -> int:
    """How many unit records in ``directory`` carry another key version (read once a process:
    units written meanwhile carry this one)."""
    count = 0
    for path in directory.glob("*.json") if directory.is_dir() else ():
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(record, dict) and "settings" in record:
            count += record.get("key_version", 1) != KEY_VERSION
    return count
