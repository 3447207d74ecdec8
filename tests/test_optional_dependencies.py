"""Optional dependencies: the core package imports without them, and a missing one is named."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_core_package_does_not_import_pyro() -> None:
    result = run_python("import sys, vbnn, vbnn.cli; print('pyro' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("from vbnn.references.nuts import run_nuts, NUTSConfig\nimport torch\n"
         "run_nuts(lambda t: (t ** 2).sum(), torch.zeros(2), NUTSConfig())",
         "pip install 'vbnn[nuts]'"),
        ("import vbnn.references.chain_diagnostics", "pip install 'vbnn[nuts]'"),
    ],
)  # fmt: skip
def test_without_pyro_the_error_names_the_extra(code: str, message: str) -> None:
    hide = "import sys\nsys.modules['pyro'] = None\n"  # import pyro now raises ImportError
    result = run_python(hide + code)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and message in result.stderr
