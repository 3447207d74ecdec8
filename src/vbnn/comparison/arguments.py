"""The flags of ``vbnn compare`` (its job is ``comparison.command.run``), apart from the job so
that building the parser (``vbnn --help``) imports none of the libraries a comparison needs."""

from __future__ import annotations

import argparse
from pathlib import Path

from vbnn.comparison.config import CompareConfig, NetworkConfig
from vbnn.comparison.folds import Task
from vbnn.sweeps.executors import add_executor_arguments

DESCRIPTION = (
    "Train families (and baselines) on your network (--model) or on MLPs, over K folds of a CSV "
    "table, a UCI set or an .npz file, or over seeds with its test set; print every metric as "
    "mean +- standard error, the paired gap to the best family and a verdict; draw a figure."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults, network = CompareConfig(), NetworkConfig()
    parser.add_argument("old_data", nargs="?", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--data",
        default=None,
        metavar="FILE",
        help="a CSV file with a header, a UCI name, or (with --model) an .npz with x, y and "
        "optionally x_test, y_test, x_ood",
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="MODULE:FUNCTION",
        help="package.module:function returning your network (nn.Module); the current "
        "directory is searched first",
    )
    parser.add_argument("--target", default=None, metavar="COLUMN", help="the column to predict")
    parser.add_argument(
        "--families",
        default=None,
        help="comma list (default: mf,gd,fc,es,map; classification mf,gd,fc,point)",
    )
    parser.add_argument(
        "--folds", type=int, default=5, help="K (default 5; an .npz with a test set: none)"
    )
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
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"table classification ({defaults.epochs}) or --model ({network.epochs})",
    )
    parser.add_argument("--seeds", type=int, default=1, help="--model: seeds per test set or fold")
    parser.add_argument("--batch-size", type=int, default=network.batch_size, help="--model")
    parser.add_argument(
        "--learning-rate", type=float, default=network.learning_rate, help="--model: Adam step"
    )
    parser.add_argument(
        "--ensemble-size", type=int, default=network.ensemble_size, help="--model: members"
    )
    parser.add_argument(
        "--patience",
        type=int,
        default=network.patience,
        help="--model: early stopping of point, ensemble, laplace (epochs; 0: none)",
    )
    parser.add_argument(
        "--ivon-learning-rate",
        type=float,
        default=network.ivon.learning_rate,
        help="--model: the ivon entries' step size (vbnn.IVON)",
    )
    parser.add_argument(
        "--ivon-hess-init",
        type=float,
        default=network.ivon.hess_init,
        help="--model: the ivon entries' initial Hessian h0 (sets their initial std)",
    )
    parser.add_argument(
        "--ivon-clip-radius",
        type=float,
        default=network.ivon.clip_radius,
        help="--model: the bound of the ivon entries' preconditioned step (inf: none)",
    )
    parser.add_argument("--device", default=None, help="--model: where to train (cuda, cpu)")
    parser.add_argument("--hidden", type=int, nargs="*", default=list(defaults.hidden))
    parser.add_argument(
        "--test-samples",
        type=int,
        default=None,
        help=f"predictive samples (table {defaults.test_samples}, --model {network.test_samples})",
    )
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
