"""Shared fixtures: a fixed seed before every test, the data directory, small problems."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The UCI data directory: $VBNN_DATA_DIR, else ../shared/data; skip if neither exists."""
    candidate = Path(os.environ.get("VBNN_DATA_DIR", SHARED_DATA))
    if not (candidate / "uci" / "bostonHousing" / "data.txt").is_file():
        pytest.skip(f"UCI data not found under {candidate}")
    return candidate
