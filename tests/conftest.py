"""Shared fixtures: a fixed seed before every test, the data directory, small problems; JAX's
compilation cache for the session."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# JAX reads these when it is imported; the size bound makes its cache lock every read and write,
# so that processes started from the tests (Ray workers, pytest-xdist workers) may share it
JAX_CACHE = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    "JAX_COMPILATION_CACHE_MAX_SIZE": str(2**31),
}
_JAX_CACHE_FOLDER = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """JAX's persistent compilation cache in a fresh folder of this session (unless one is set);
    one torch thread in each worker of ``pytest -n N`` (pytest-xdist).

    The tests of the reference samplers compile the same programs many times (each run builds
    its functions anew, which JAX's in-memory cache does not recognise); the persistent cache is
    keyed by the compiled program itself, so the second compilation of a program is a read.
    The workers inherit the controller's environment, hence its cache folder, and share it.

    N workers on N cores, each with torch's default of one thread a core, would ask for N^2
    threads: a worker (``PYTEST_XDIST_WORKER`` set) keeps to one, and so do the processes its
    tests start (``OMP_NUM_THREADS``). A test that needs more threads sets them itself.
    """
    if "PYTEST_XDIST_WORKER" in os.environ:
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="vbnn-tests-jax-cache-")
    config.stash[_JAX_CACHE_FOLDER] = folder
    os.environ.update(JAX_CACHE, JAX_COMPILATION_CACHE_DIR=folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_JAX_CACHE_FOLDER, None)
    if folder is not None:
        for name in [*JAX_CACHE, "JAX_COMPILATION_CACHE_DIR"]:
            os.environ.pop(name, None)
        shutil.rmtree(folder, ignore_errors=True)


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


@pytest.fixture
def entry_trainings(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """Every call of ``vbnn.train`` by ``compare``'s entries (``comparison.entries``), recorded
    as (the network's class name, the call's keyword options), in order; each call still
    trains."""
    from vbnn.comparison import entries

    calls: list[tuple[str, dict]] = []
    real = entries.train

    def recorded(network, data, **options):
        calls.append((type(network).__name__, options))
        return real(network, data, **options)

    monkeypatch.setattr(entries, "train", recorded)
    return calls
