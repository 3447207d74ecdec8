"""Where data lives: --data-dir > $VBNN_DATA_DIR > a per-user cache directory."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vbnn" / "data"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: the argument, else $VBNN_DATA_DIR, else ~/.cache/vbnn/data.

    The directory holds ``uci/<folder>/...`` as laid out in shared/data/README.md.
    """
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get("VBNN_DATA_DIR")
    if env:
        return Path(env)
    return user_cache_dir()


def published_path() -> Path:
    """The papers' published figures: ``<data dir>/../reference/published.json`` when present
    (the shared folder beside a checkout), else ``shared/reference/published.json`` beside the
    repository that holds this package."""
    beside_data = resolve_data_dir().parent / "reference" / "published.json"
    if beside_data.is_file():
        return beside_data
    checkout = Path(__file__).resolve().parents[3]
    return checkout.parent / "shared" / "reference" / "published.json"
