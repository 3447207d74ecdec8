"""``vbnn compare DATA``: which family for my data? (``vbnn.compare`` on the command line)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from vbnn.comparison.config import CompareConfig
from vbnn.comparison.folds import Task, splits_from_column
from vbnn.comparison.run import compare
from vbnn.data.table import read_table
from vbnn.plots import pyplot
from vbnn.sweeps.executors import add_executor_arguments, settings_from

DESCRIPTION = (
    "Train families (and the ES/MAP baselines) on K folds of a CSV table or a UCI set, tuned "
    "per fold on validation rows carved from its training rows; print every metric as mean +- "
    "standard error over folds, the paired gap to the best family and a verdict; draw a figure."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = CompareConfig()
    parser.add_argument("data", metavar="DATA", help="a CSV file with a header, or a UCI name")
    parser.add_argument("--target", default=None, metavar="COLUMN", help="the column to predict")
    parser.add_argument(
        "--families",
        default=None,
        help="comma list (default: mf,gd,fc,es,map; classification mf,gd,fc,point)",
    )
    parser.add_argument("--folds", type=int, default=5, help="K (default 5)")
    parser.add_argument(
        "--fold-column",
        default=None,
        metavar="COLUMN",
        help="a CSV column naming each row's fold: use those splits, not K folds",
    )
    parser.add_argument(
        "--task",
        choices=[t.value for t in Task],
        default=None,
        help="default: inferred from the target (and printed)",
    )
    parser.add_argument("--no-tune", action="store_true", help="use the presets, no search")
    parser.add_argument(
        "--trials",
        type=int,
        default=defaults.trials,
        help=f"candidates per family and fold (default {defaults.trials})",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="regression: full-batch steps (default 5000, ES 2000)",
    )
    parser.add_argument("--epochs", type=int, default=defaults.epochs, help="classification")
    parser.add_argument("--hidden", type=int, nargs="*", default=list(defaults.hidden))
    parser.add_argument("--test-samples", type=int, default=defaults.test_samples)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--database",
        default=None,
        metavar="FILE",
        help="results SQLite file (default: OUT/results.sqlite); resumable",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("compare"),
        metavar="DIR",
        help="where the figure, the table and the database go",
    )
    parser.add_argument("--data-dir", default=None, help="overrides $VBNN_DATA_DIR (UCI names)")
    parser.add_argument("--no-progress", action="store_true")
    add_executor_arguments(parser)


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


def run(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    data, y, target, splits = _data(args)
    families = None if args.families is None else [f.strip() for f in args.families.split(",")]
    database = Path(args.database) if args.database else args.out / "results.sqlite"
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
        epochs=args.epochs,
        hidden=tuple(args.hidden),
        test_samples=args.test_samples,
        seed=args.seed,
    )
    folds = int(result.summary["folds"].max())
    tuned = "presets, no search" if args.no_tune else f"tuned per fold, {args.trials} trials"
    print(f"task: {result.task.value} ({result.task_reason})")
    print(f"{result.name}: {folds} folds, {tuned}; mean +- standard error over folds")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(result.table.to_string())
    print(f"verdict (test log-likelihood, paired over folds): {result.verdict}")
    figure = result.plot(args.out / "compare.png")
    (args.out / "compare.md").write_text(result.to_markdown())
    print(
        f"figure: {args.out / 'compare.png'}; table: {args.out / 'compare.md'}; results: {database}"
    )
    print(f"wall time {time.perf_counter() - start:.1f} s", file=sys.stderr)
    pyplot().close(figure)
