"""The library stands apart from the lab: every module of ``vbnn`` imports without importing the
papers' reproductions (``vbnn_lab``), which depend on the library, never the reverse. Inside the
library, imports run one way: ``vbnn.core``, the bottom floor, imports nothing of vbnn above it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import vbnn.core

LAB_SOURCE = Path(__file__).resolve().parents[1] / "lab" / "src"

# Imports every module of vbnn in one fresh interpreter. A module whose optional dependency is
# missing (an extra: jax, pyro, ray) is listed apart; a missing vbnn or vbnn_lab is a failure.
WALK = """
import importlib, json, pkgutil, sys
import vbnn
imported, optional, failed = [], [], []
for module in pkgutil.walk_packages(vbnn.__path__, "vbnn."):
    try:
        importlib.import_module(module.name)
        imported.append(module.name)
    except ImportError as error:
        missing = (error.name or "").split(".")[0]
        (failed if missing in ("", "vbnn", "vbnn_lab") else optional).append(
            f"{module.name}: {type(error).__name__}: {error}")
print(json.dumps({"imported": imported, "optional": optional, "failed": failed,
                  "lab": sorted(name for name in sys.modules if name.split(".")[0] == "vbnn_lab")}))
"""


def test_every_module_of_the_library_imports_without_the_lab() -> None:
    # the lab importable, as in an environment that installed both: importing it would show
    paths = [str(LAB_SOURCE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    result = subprocess.run(
        [sys.executable, "-c", WALK],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["failed"], report["failed"]
    assert report["lab"] == [], f"the library imported {report['lab']}"
    assert len(report["imported"]) >= 80, report  # the walk found the library's modules
    assert "vbnn.cli" in report["imported"] and "vbnn.regression.split_units" in report["imported"]


def _vbnn_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every vbnn module that the file at ``path`` imports, at any depth (inside
    functions and ``TYPE_CHECKING`` blocks too); a relative import is resolved against the
    module's package, ``vbnn.core``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.ImportFrom):  # level 1 is vbnn.core, level 2 vbnn
            package = ["vbnn", "core"][: 3 - node.level]
            found.append((node.lineno, ".".join([*package, *filter(None, [node.module])])))
    return [(line, name) for line, name in found if name.split(".")[0] == "vbnn"]


def test_the_core_imports_nothing_of_vbnn_above_it() -> None:
    core = Path(vbnn.core.__file__).parent
    files = sorted(core.glob("*.py"))
    assert {"contracts.py", "randomness.py"} <= {f.name for f in files}, files
    upward = [
        f"{path.name}:{line} imports {name}"
        for path in files
        for line, name in _vbnn_imports(path)
        if name != "vbnn.core" and not name.startswith("vbnn.core.")
    ]
    assert not upward, upward


def test_the_sweeps_import_no_pipeline() -> None:
    """The executors and the driver of stored runs sit below the pipelines that use them (the UCI
    engine, compare, the lab): they import only the core, the stores and themselves."""
    sweeps = Path(vbnn.core.__file__).parents[1] / "sweeps"
    files = sorted(sweeps.glob("*.py"))
    assert {"driver.py", "executors.py"} <= {f.name for f in files}, files
    allowed = ("vbnn.core", "vbnn.stores", "vbnn.sweeps")
    upward = [
        f"{path.name}:{line} imports {name}"
        for path in files
        for line, name in _vbnn_imports(path)
        if not any(name == floor or name.startswith(floor + ".") for floor in allowed)
    ]
    assert not upward, upward
