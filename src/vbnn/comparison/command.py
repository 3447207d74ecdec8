"""``vbnn compare --data FILE``: which family for my data? (``vbnn.compare`` on the command line).

``--data`` is a CSV table (with ``--target``), a UCI set's name, or, with ``--model``, an ``.npz``
file holding ``x`` and ``y`` (and optionally ``x_test``, ``y_test``, ``x_ood``). ``--model
package.module:function`` names a function of no arguments returning the network to compare on
(``vbnn.compare``'s network form); without it the families train MLPs on the table.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vbnn.comparison.config import CompareConfig, NetworkConfig
from vbnn.comparison.folds import Task, infer_task, splits_from_column
from vbnn.comparison.run import compare
from vbnn.data.table import read_table
from vbnn.plots import pyplot
from vbnn.stores.atomic import write_atomic
from vbnn.sweeps.executors import settings_from
from vbnn.training.natural_gradient import IVON

NPZ_KEYS = ("x", "y", "x_test", "y_test", "x_ood")


def _data(args: argparse.Namespace) -> tuple[object, object, str | None, object]:
    """(data, y, target, splits): with --fold-column the table is read here and that column
    becomes the splits (it is no input)."""
    if args.fold_column is None:
        return args.data, None, args.target, None
    if args.target is None:
        raise ValueError("--fold-column needs --target")
    x, y, columns = read_table(args.data, args.target, class_names=True)
    if args.fold_column not in columns:
        raise ValueError(
            f"--fold-column {args.fold_column!r}: no such input column in "
            f"{args.data}; the inputs are {columns}"
        )
    position = columns.index(args.fold_column)
    return np.delete(x, position, axis=1), y, None, splits_from_column(x[:, position])


def load_model(spec: str) -> Any:
    """The function ``package.module:function`` names (the current directory searched first).

    Raises:
        ValueError: no ``:``, a module that does not import, no such function, or not callable.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--model {spec!r}: expected package.module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--model {spec!r}: cannot import {module_name!r}: {error}") from error
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ValueError(f"--model {spec!r}: {module_name} has no function {attribute!r}")
    return function


def network_data(args: argparse.Namespace) -> dict[str, Any]:
    """``compare``'s data arguments for ``--model``: (x, y) and, when the .npz holds them, the
    test set and the out-of-distribution inputs; a CSV's target is classes when
    ``folds.infer_task`` (or ``--task``) says so."""
    path = Path(args.data)
    if path.suffix == ".npz":
        with np.load(path) as archive:
            arrays = {k: archive[k] for k in archive.files}
        missing = [k for k in ("x", "y") if k not in arrays]
        unknown = sorted(set(arrays) - set(NPZ_KEYS))
        if missing or unknown:
            raise ValueError(
                f"{path}: holds {sorted(arrays)}; it needs x and y and may hold x_test, y_test, "
                f"x_ood (missing {missing}, unknown {unknown})"
            )
        if ("x_test" in arrays) != ("y_test" in arrays):
            raise ValueError(f"{path}: give x_test and y_test together")
        test = (arrays["x_test"], arrays["y_test"]) if "x_test" in arrays else None
        return {"y": (arrays["x"], arrays["y"]), "test": test, "ood": arrays.get("x_ood")}
    if args.target is None:
        raise ValueError(f"--data {path}: a CSV table needs --target COLUMN (or give an .npz)")
    x, y, _ = read_table(path, args.target)
    task = Task(args.task) if args.task else infer_task(y)[0]
    y = y.astype(np.int64) if task is Task.CLASSIFICATION else y.astype(np.float32)
    return {"y": (x.astype(np.float32), y), "test": None, "ood": None}


def run(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    if args.old_data is not None:
        raise ValueError(f"give the data file as --data {args.old_data} (as vbnn fit does)")
    if args.data is None:
        raise ValueError("--data FILE: the CSV table, UCI name or .npz file to compare on")
    families = None if args.families is None else [f.strip() for f in args.families.split(",")]
    database = Path(args.database) if args.database else args.out / "results.sqlite"
    if args.model is not None:
        arguments = network_data(args)
        result = compare(
            load_model(args.model),
            **arguments,
            seeds=args.seeds,
            families=families,
            folds=None if arguments["test"] is not None else args.folds,
            database=database,
            executor=settings_from(args),
            progress=not args.no_progress,
            epochs=args.epochs or NetworkConfig().epochs,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            test_samples=args.test_samples or NetworkConfig().test_samples,
            ensemble_size=args.ensemble_size,
            patience=args.patience or None,
            device=args.device,
            ivon=IVON(
                learning_rate=args.ivon_learning_rate,
                hess_init=args.ivon_hess_init,
                clip_radius=args.ivon_clip_radius,
            ),
            seed=args.seed,
        )
        _report(args, result, database, "trained by vbnn.train", start)
        return
    data, y, target, splits = _data(args)
    result = compare(
        data,
        y,
        target=target,
        families=families,
        folds=args.folds,
        splits=splits,
        task=args.task,
        database=database,
        executor=settings_from(args),
        progress=not args.no_progress,
        data_dir=args.data_dir,
        tune=not args.no_tune,
        trials=args.trials,
        batch=min(CompareConfig().batch, args.trials),
        iterations=args.iterations,
        epochs=args.epochs or CompareConfig().epochs,
        hidden=tuple(args.hidden),
        test_samples=args.test_samples or CompareConfig().test_samples,
        seed=args.seed,
    )
    tuned = "presets, no search" if args.no_tune else f"tuned per fold, {args.trials} trials"
    _report(args, result, database, tuned, start)


def _report(args: argparse.Namespace, result: Any, database: Path, how: str, start: float) -> None:
    """Print the table and the verdict; write the figure and the Markdown table."""
    count = int(result.summary["folds"].max())
    print(f"task: {result.task.value} ({result.task_reason})")
    print(f"{result.name}: {count} {result.over}, {how}; mean +- standard error over them")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(result.table.to_string())
    print(f"verdict (test log-likelihood, paired over {result.over}): {result.verdict}")
    figure = result.plot(args.out / "compare.png")
    write_atomic(args.out / "compare.md", result.to_markdown())
    print(
        f"figure: {args.out / 'compare.png'}; table: {args.out / 'compare.md'}; results: {database}"
    )
    print(f"wall time {time.perf_counter() - start:.1f} s", file=sys.stderr)
    pyplot().close(figure)
