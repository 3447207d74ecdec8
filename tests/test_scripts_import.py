"""Every script under benchmarks/, reproductions/ and examples/ imports against today's vbnn and
the lab beside it (vbnn_lab, the papers' reproductions).

Each script is loaded by path under a fresh module name, with its own folder first on
``sys.path`` (some import a module beside them), and without running its ``__main__`` block, so
a name that moved or went from the library fails here, naming the script and the error. Every
script needs a ``__main__`` guard, except a module that other scripts import from beside it. A
script that needs a package outside vbnn's required dependencies (an extra such as ``jax``, or
one a benchmark installs by hand such as ``bayesian_torch``) is skipped when that package is
missing.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT_FOLDERS = ("benchmarks", "reproductions", "examples")
SCRIPTS = sorted(
    path
    for folder in SCRIPT_FOLDERS
    for path in (ROOT / folder).rglob("*.py")
    if "__pycache__" not in path.parts
)


def required_packages() -> set[str]:
    """vbnn's required dependencies (``project.dependencies`` of pyproject.toml) as normalised
    names (lower case, ``-`` and ``.`` as ``_``), with ``vbnn`` itself and the lab's package
    (``vbnn_lab``, which ``make install`` installs beside it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.match(r"[A-Za-z0-9_.-]+", entry).group(0) for entry in project["dependencies"]}
    return {"vbnn", "vbnn_lab", *(re.sub(r"[-.]", "_", name.lower()) for name in names)}


def has_main_guard(path: Path) -> bool:
    """Whether ``path`` has a module-level ``if __name__ == "__main__":`` block."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(getattr(side, "value", None) == "__main__" for side in node.test.comparators)
        for node in tree.body
    )


def helper_modules() -> set[Path]:
    """The files that another script imports from beside it (``from converted_step import ...``):
    modules of shared code rather than scripts, so they need no ``__main__`` guard."""
    helpers = set()
    for path in SCRIPTS:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            helpers |= {
                path.parent / f"{n}.py" for n in names if (path.parent / f"{n}.py").is_file()
            }
    return helpers


HELPERS = helper_modules()


def test_scripts_are_found() -> None:
    assert len(SCRIPTS) >= 10, f"found only {len(SCRIPTS)} scripts under {SCRIPT_FOLDERS}"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_imports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = path.relative_to(ROOT)
    if path not in HELPERS:  # a module imported from beside it holds shared code
        assert has_main_guard(path), f'{script}: no `if __name__ == "__main__":` guard'
    name = "script_" + re.sub(r"\W", "_", str(script.with_suffix("")))
    monkeypatch.syspath_prepend(str(path.parent))
    loaded_before = set(sys.modules)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as error:
        package = (error.name or "").split(".")[0]
        if not package or re.sub(r"[-.]", "_", package.lower()) in required_packages():
            pytest.fail(f"{script}: {type(error).__name__}: {error}")
        pytest.skip(f"{script}: needs {package!r}, which is not installed ({error})")
    except Exception as error:
        pytest.fail(f"{script}: {type(error).__name__}: {error}")
    finally:
        # the script and the modules beside it, so that another folder's namesake loads afresh
        for loaded in set(sys.modules) - loaded_before:
            origin = getattr(sys.modules[loaded], "__file__", None) or ""
            if loaded == name or Path(origin).parent == path.parent:
                del sys.modules[loaded]
