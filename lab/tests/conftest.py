"""The lab's tests share the library's test fixtures and helpers (``tests/`` at the repository
root): its ``conftest.py`` fixtures (a fixed seed before every test, the UCI data directory) and
session set-up, and its helper modules (``stored_rows``), without a second copy of either."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

LIBRARY_TESTS = Path(__file__).resolve().parents[2] / "tests"
if str(LIBRARY_TESTS) not in sys.path:
    sys.path.insert(0, str(LIBRARY_TESTS))  # the helper modules beside the library's tests

# loaded under its own name: both files are top-level modules named ``conftest`` for pytest
_spec = importlib.util.spec_from_file_location("library_conftest", LIBRARY_TESTS / "conftest.py")
_library = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_library)
_seed, data_dir = _library._seed, _library.data_dir
# its session set-up too, for a run of the lab's tests alone (JAX's compilation cache, one torch
# thread a pytest-xdist worker); beside the library's tests both run, and whichever runs second
# finds the cache already set
pytest_configure, pytest_unconfigure = _library.pytest_configure, _library.pytest_unconfigure
