"""``import vbnn`` loads torch, numpy and the core, not the libraries of rarer features: those
load when the feature that needs them is first used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import vbnn

HEAVY = ("optuna", "pandas", "sklearn", "scipy", "matplotlib", "ray", "jax", "transformers")


def _run(code: str) -> str:
    """The standard output of ``code`` run by a fresh interpreter that imports this ``vbnn``."""
    source = str(Path(vbnn.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_vbnn_loads_none_of_the_heavy_libraries() -> None:
    """After ``import vbnn`` (and the names it binds eagerly, ``diagnose`` among them) none of
    optuna, pandas, scikit-learn, scipy, matplotlib, ray or jax is in ``sys.modules``, nor
    (unless ``import torch`` loads them itself) torch's compiler frontend Dynamo and sympy, which
    ``torch.compile`` loads when it is called."""
    code = (
        "import sys, torch\n"
        "with_torch = set(sys.modules)\n"
        "import vbnn\n"
        "vbnn.diagnose, vbnn.metrics, vbnn.plots, vbnn.train, vbnn.convert\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
        "compiler = ('torch._dynamo', 'sympy')\n"
        "print(' '.join(m for m in compiler if m in sys.modules and m not in with_torch))\n"
        "print(vbnn.__file__)\n"
    )
    heavy, compiler, origin = _run(code).splitlines()
    assert heavy == "" and compiler == ""
    assert Path(origin).resolve() == Path(vbnn.__file__).resolve()


def test_a_feature_that_needs_scikit_learn_loads_it_when_used() -> None:
    """``vbnn.BayesianRegressor`` resolves on first access, importing scikit-learn then; it is
    the estimator of ``vbnn.regression.estimator`` and survives ``clone`` and a short fit."""
    code = (
        "import sys, numpy as np, vbnn\n"
        "before = 'sklearn' in sys.modules\n"
        "from sklearn.base import clone\n"
        "from vbnn.regression.estimator import BayesianRegressor\n"
        "assert vbnn.BayesianRegressor is BayesianRegressor\n"
        "estimator = clone(vbnn.BayesianRegressor(iterations=3, samples=2))\n"
        "x = np.random.default_rng(0).normal(size=(20, 2))\n"
        "estimator.fit(x, x.sum(1))\n"
        "print(before, 'sklearn' in sys.modules, estimator.predict(x).shape)\n"
    )
    assert _run(code).split() == ["False", "True", "(20,)"]


def test_every_public_name_resolves() -> None:
    """Each name of ``vbnn.__all__`` is an attribute (the lazy ones imported on access), is
    listed by ``dir(vbnn)``; a subpackage not yet imported is imported on access, as when
    ``import vbnn`` imported them all; an unknown name is an AttributeError that names it."""
    for name in vbnn.__all__:
        assert getattr(vbnn, name) is not None, name
        assert name in dir(vbnn), name
    assert vbnn.compare.__module__ == "vbnn.comparison.run"
    code = "import vbnn\nprint(vbnn.regression.method_config.__module__, vbnn.comparison.Task)"
    assert _run(code).split() == ["vbnn.regression.methods", "<enum", "'Task'>"]
    try:
        vbnn.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("vbnn.no_such_name did not raise AttributeError")


def test_the_command_line_help_loads_none_of_the_heavy_libraries() -> None:
    """Building ``vbnn``'s parser and printing the help of ``vbnn`` and of every built-in
    subcommand load none of optuna, pandas, scikit-learn, scipy, matplotlib, ray or jax: the
    jobs import them when they run. (An installed command's flags come from its own package,
    ``vbnn reproduce`` from the lab, and are added only when that command is parsed.)"""
    code = (
        "import contextlib, io, sys\n"
        "from vbnn.cli import build_parser, main\n"
        "parser = build_parser()\n"
        "commands = [['uci'], ['fit'], ['compare'], ['demo'], ['data', 'download'],\n"
        "            ['data', 'check'], ['diagnose', 'pruning'], ['diagnose', 'report'],\n"
        "            ['sweep'], []]\n"
        "shown = []\n"
        "for command in commands:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        try:\n"
        "            main([*command, '--help'])\n"
        "        except SystemExit:\n"
        "            pass\n"
        "    shown.append(out.getvalue().startswith('usage: vbnn'))\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
        "print(all(shown), len(shown))\n"
    )
    heavy, shown = _run(code).splitlines()
    assert heavy == ""
    assert shown == "True 10"  # every help was printed
