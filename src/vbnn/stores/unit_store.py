"""Finished units of work on disk, keyed by the settings that made them: how runs resume.

A unit (a NUTS chain, a trained network, one cell of an experiment) is stored as
``<directory>/<key>.json`` holding ``{"settings": ..., "identity": ..., "info": ...}`` (the full
settings, the part of them that identifies the unit, and any JSON-serialisable result) and, when it
has arrays (samples, a state dict), as ``<directory>/<key>.npz`` too. Settings are a JSON dict, a
frozen dataclass, or a dict holding dataclasses; ``key`` is the first 16 hex digits of the SHA-256
of their identity (``stores.keys.identity``: a dataclass's fields at their defaults left out, so a
new field with a default keeps every stored key) as sorted JSON, with the version of this key
scheme (``KEY_VERSION``). A unit found by its key whose stored settings disagree with today's on a
field both have (a default that changed its value) is an error naming the file and the field; a
unit stored under another key version, or the same settings stored under another key, is refused
with a message naming the file. Every file is written by ``atomic.write_atomic`` and the JSON record
is the one that counts: the arrays go first to ``.<key>.npz.pending``, then the record (holding
the arrays' SHA-256), then the pending file replaces ``<key>.npz``. A kill before the record keeps
the previous unit (or none) whole, the pending file being ignored; a kill after it leaves a pending
file that matches the record, which the next read puts in place. So a unit exists only when
complete, a unit written again (a chain in flight) is the old one or the new one, a killed run loses
the unit in flight and nothing else, and re-running the same command skips every stored unit. One
process writes a unit at a time (``claim``). (UCI runs resume through the results database
instead, where they sit beside the Optuna studies that tuned them.)

Processes on one machine can share a directory's units: ``claim`` marks a unit as being computed
(``<key>.claim`` holds the host and process id), so that another process computes a different
one instead of the same one twice; a claim whose process has ended is taken over."""

from __future__ import annotations

import contextlib
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
from vbnn.stores.keys import first_difference, identity, plain

Arrays = dict[str, np.ndarray]
# The version of how a key is computed from settings; a store of another version is refused.
KEY_VERSION = 2


class StaleUnitsError(ValueError):
    """A directory holds units keyed otherwise than this vbnn keys them (it names the file)."""


class ChangedDefaultError(ValueError):
    """A unit found by its key was made with settings that differ from today's on a field both
    have: a default changed its value (it names the file and the field)."""


def settings_key(settings: Any) -> str:
    """16 hex digits identifying ``settings`` (a JSON dict, a dataclass, or a dict holding
    dataclasses) under ``KEY_VERSION``: the hash of their ``keys.identity``."""
    text = json.dumps({"key_version": KEY_VERSION, "settings": identity(settings)},
                      sort_keys=True, default=str)  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _as_json(value: Any) -> Any:
    """``value`` as it reads back from a record (what ``json`` makes of it)."""
    return json.loads(json.dumps(value, default=str))


def save(directory: Path, settings: Any, arrays: Arrays | None, info: dict[str, Any]) -> Path:
    """Store ``info`` (and ``arrays``, if any) under the key of ``settings``; returns the JSON."""
    directory, key = Path(directory), settings_key(settings)
    record = {
        "settings": plain(settings), "identity": identity(settings), "info": info,
        "arrays": arrays is not None, "key_version": KEY_VERSION,
    }  # fmt: skip
    if arrays is not None:

        def write_arrays(path: Path) -> None:
            with path.open("wb") as handle:
                np.savez_compressed(handle, **arrays)

        record["arrays_sha256"] = _sha256(write_atomic(_pending(directory, key), write_arrays))
    text = json.dumps(record, indent=2, sort_keys=True, default=str)
    path = write_atomic(directory / f"{key}.json", text)  # the unit is complete from here on
    if arrays is not None:
        _put_pending_in_place(directory, key)
    return path


def _pending(directory: Path, key: str) -> Path:
    """Where ``save`` writes a unit's arrays before its record (module docstring)."""
    return directory / f".{key}.npz.pending"


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _put_pending_in_place(directory: Path, key: str) -> None:
    """Move the pending arrays of ``key`` to ``<key>.npz`` (gone already is fine: a reader
    finishing a killed ``save`` moved them)."""
    with contextlib.suppress(FileNotFoundError):
        os.replace(_pending(directory, key), directory / f"{key}.npz")


def load(directory: Path, settings: Any) -> tuple[Arrays | None, dict[str, Any]] | None:
    """(arrays or None, info) stored for ``settings``, or None when the unit is not stored.

    Raises:
        ChangedDefaultError: the stored settings differ from ``settings`` on a field both have
            (a changed default, or a key collision); the message names the file and the field.
        ValueError: the unit's arrays are missing; the message names the file.
        StaleUnitsError: the unit is not stored, and ``directory`` holds units of another key
            version, or these settings under another key (the message names the file).
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


def load_info(directory: Path, settings: Any) -> dict[str, Any] | None:
    """The info stored for ``settings``, without reading its arrays; None when the unit is not
    stored. Raises ``load``'s errors, but for missing arrays."""
    found = _record(directory, settings)
    return None if found is None else found[1]["info"]


def _record(directory: Path, settings: Any) -> tuple[Path, dict[str, Any]] | None:
    """(path, record) of the unit of ``settings``, or None when it is not stored (``load``)."""
    key = settings_key(settings)
    record_path = Path(directory) / f"{key}.json"
    today = _as_json(plain(settings))
    if not record_path.is_file():
        stale, keyed_otherwise = _stored_units(Path(directory).resolve())
        if stale:
            raise StaleUnitsError(
                f"{directory}: {stale} stored unit(s) are keyed by an older vbnn (key version "
                f"other than {KEY_VERSION}), which this vbnn does not read; move them aside to "
                "compute them anew, or read them with the vbnn that wrote them"
            )
        other = keyed_otherwise.get(json.dumps(today, sort_keys=True))
        if other is not None and other != key:
            raise StaleUnitsError(
                f"{Path(directory) / other}.json: holds these settings under the key {other}, "
                f"which an older vbnn computed (this one keys them {key}); move it aside to "
                "compute the unit anew, or read it with the vbnn that wrote it"
            )
        return None
    record = json.loads(record_path.read_text())
    pending = _pending(Path(directory), key)
    killed_after_record = "arrays_sha256" in record and pending.is_file()
    if killed_after_record and _sha256(pending) == record["arrays_sha256"]:
        _put_pending_in_place(Path(directory), key)
    field = first_difference(record.get("settings"), today)
    if field is not None:
        raise ChangedDefaultError(
            f"unit store {record_path}: stored settings differ from today's at {field!r} "
            f"(stored {_at(record.get('settings'), field)!r}, today {_at(today, field)!r}): a "
            "default changed its value, or the key collides; move the unit aside to compute it "
            "anew"
        )
    return record_path, record


def _at(settings: Any, field: str) -> Any:
    """The value at a dotted ``field`` path of ``first_difference`` (``a.b[2]``)."""
    value = settings
    for part in field.replace("[", ".[").split("."):
        if not part or part == "(the whole settings)":
            continue
        value = value[int(part[1:-1])] if part.startswith("[") else value[part]
    return value


def claim(directory: Path, settings: Any) -> bool:
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


def remove(directory: Path, settings: Any) -> None:
    """Delete the unit of ``settings`` (none is fine): its record first, so that a kill between
    the two files leaves no unit rather than one whose arrays are missing."""
    key = settings_key(settings)
    for suffix in (".json", ".npz"):
        (Path(directory) / f"{key}{suffix}").unlink(missing_ok=True)
    _pending(Path(directory), key).unlink(missing_ok=True)


def claimed(directory: Path, settings: Any) -> bool:
    """Whether another process that may still run holds the claim on the unit of ``settings``
    (one on another host always may: it cannot be checked from here)."""
    return _claimed_elsewhere(Path(directory) / f"{settings_key(settings)}.claim")


def release(directory: Path, settings: Any) -> None:
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
def _stored_units(directory: Path) -> tuple[int, dict[str, str]]:
    """(how many unit records in ``directory`` carry another key version, their full settings
    as sorted JSON -> the key they are stored under), read once a process: units written
    meanwhile are keyed by this vbnn."""
    stale, keyed = 0, {}
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(record, dict) and "settings" in record:
            stale += record.get("key_version", 1) != KEY_VERSION
            keyed[json.dumps(record["settings"], sort_keys=True)] = path.stem
    return stale, keyed
