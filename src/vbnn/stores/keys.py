"""What identifies a stored unit or run: its settings without the fields left at their defaults.

A store keys a result by a hash of its settings (``unit_store.settings_key``,
``results_db.config_hash``). Hashing every field would give every stored result a new key each
time a settings class gains a field, although the new field, at its default, changes nothing that
was computed. So a key hashes the *identity* of the settings (:func:`identity`):

* a dataclass -> the fields whose value differs from the field's default (``default`` or
  ``default_factory``), each as its identity, plus what names its type where that is not a field
  (the keys of its ``to_dict()`` that are not fields, e.g. ``TrainConfig``'s ``algorithm``);
  a field without a default is always kept;
* an ``Enum`` -> its value; a tuple or list -> a list; a dict -> the same keys (as strings) with
  the identities of its values; anything else as it is.

A plain JSON dict is therefore its own identity: keys of settings written as plain dicts are
those that hashing every field gives. The full settings (:func:`plain`, every field) are stored
beside the result, and a store that finds a result by key compares them with today's on the
fields both have (:func:`first_difference`): a default that changed its value gives the same
key, and must not reuse what the old default computed.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any


def plain(value: Any) -> Any:
    """``value`` as JSON holds it, every field included: a dataclass as its ``to_dict()`` (or its
    fields), enums by value, tuples as lists, dict keys as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return plain(value.to_dict())
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def identity(value: Any) -> Any:
    """The part of ``value`` that identifies it: :func:`plain`, but a dataclass's fields only
    where they differ from their defaults (recursively).

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Settings:
        ...     depth: int
        ...     noise: float = 0.1
        >>> identity({"settings": Settings(depth=2), "seed": 0})
        {'settings': {'depth': 2}, 'seed': 0}
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        out = {}
        for field in fields:
            kept = identity(getattr(value, field.name))
            default = _default(field)
            if default is dataclasses.MISSING or kept != identity(default):
                out[field.name] = kept
        if hasattr(value, "to_dict"):  # what names the type, where that is not a field
            names = {field.name for field in fields}
            out |= {k: plain(v) for k, v in value.to_dict().items() if k not in names}
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [identity(v) for v in value]
    if isinstance(value, dict):
        return {str(k): identity(v) for k, v in value.items()}
    return value


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def first_difference(stored: Any, today: Any, path: str = "") -> str | None:
    """The first field (dotted path, e.g. ``pretrain.init_std``) on which two plain settings
    disagree, looking only at the fields both have; None when they agree there.

    A field only one side has is no difference: it was added (or dropped) since, at a default
    that leaves the identity unchanged.
    """
    if isinstance(stored, dict) and isinstance(today, dict):
        for name in sorted(stored.keys() & today.keys()):
            found = first_difference(stored[name], today[name], f"{path}.{name}" if path else name)
            if found is not None:
                return found
        return None
    if isinstance(stored, list) and isinstance(today, list) and len(stored) == len(today):
        for index, (old, new) in enumerate(zip(stored, today, strict=True)):
            found = first_difference(old, new, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    return None if stored == today else (path or "(the whole settings)")
