"""The flags of ``vbnn sweep`` (its job is ``regression.sweep_command.run``), apart from the job
so that building the parser (``vbnn --help``) imports neither Optuna nor pandas."""

from __future__ import annotations

import argparse
from pathlib import Path

from vbnn.sweeps.executors import add_executor_arguments

DESCRIPTION = "run a GRID.toml of UCI runs (or an Optuna search) locally or on a Ray cluster"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("grid", metavar="GRID.toml", help="the sweep (docs/sweeps.md)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/sweep"),
        help="folder of results.sqlite (and the search's journal)",
    )
    parser.add_argument("--data-dir", default=None, help="overrides $VBNN_DATA_DIR")
    parser.add_argument("--no-progress", action="store_true")
    add_executor_arguments(parser)
