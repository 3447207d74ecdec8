"""Command line: ``vbnn uci``, ``vbnn compare``, ``vbnn demo``, ``vbnn data download|check``,
``vbnn sweep``, ``vbnn diagnose pruning|report``, and ``vbnn reproduce`` where the papers'
reproductions (the lab beside the library) are installed."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.classification.estimator import BayesianClassifier
from vbnn.comparison import command as compare_command
from vbnn.core.contracts import Activation
from vbnn.core.defaults import EARLY_STOPPING_ITERATIONS, ESTIMATOR_ITERATIONS, UCI_ITERATIONS
from vbnn.core.runs import TABLE1_METHODS, RunResult, SGLDConfig, TrainConfig, VIConfig
from vbnn.data import DATASETS, DataError, RegressionDataset, load_uci
from vbnn.data.cifar import CifarDataset, download_cifar
from vbnn.data.download import DEFAULT_BASE_URL, check, download
from vbnn.data.embedded import load_diabetes_splits
from vbnn.data.paths import resolve_data_dir
from vbnn.data.splits import parse_splits, standard_scale
from vbnn.data.table import read_table
from vbnn.diagnostics.saved import (
    PAPER_PRUNED,
    PAPER_UNITS,
    diagnose_estimator,
    diagnose_saved,
    is_paper_setting,
    write_report,
)
from vbnn.layers.registry import FAMILIES
from vbnn.regression.engine import add_runtime_arguments, run_splits
from vbnn.regression.estimator import BayesianRegressor
from vbnn.regression.methods import check_method, method_config, method_fields, method_names
from vbnn.regression.presets import GD_POSTERIOR_STD, preset
from vbnn.regression.report import comparison_table, split_table, summary, to_json
from vbnn.regression.saved_models import load_model
from vbnn.sweeps import command as sweep_command
from vbnn.sweeps.executors import SweepError
from vbnn.training.full_batch import NonFiniteLossError

EMBEDDED = "diabetes"
# the group of entry points whose modules add subcommands to ``vbnn``
COMMANDS_GROUP = "vbnn.commands"
# subcommands that another package of this repository provides: name -> (help line, how to
# install it), so that the command without that package says what to install
PACKAGED_COMMANDS = {
    "reproduce": (
        "regenerate a paper's tables and figures",
        "the papers' reproductions are the vbnn-lab package, which is not installed: from the "
        "repository's root, pip install ./lab (or make install)",
    ),
}
CIFAR_NAMES = [d.value for d in CifarDataset]


def parse_methods(text: str) -> list[str]:
    """``all`` (Table 1's six), or comma-separated methods: es, map, sgld, or a family name,
    which VI fits (mf, gd, fc, vd-layer, ...)."""
    names = list(TABLE1_METHODS) if text == "all" else [n.strip() for n in text.split(",")]
    known = method_names()
    for name in names:
        if name in FAMILIES and name not in known:  # a family the engine cannot train: why
            try:
                check_method(name)
            except ValueError as error:
                raise argparse.ArgumentTypeError(f"--method {text!r}: {error}") from None
    unknown = [name for name in names if name not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"--method {text!r}: {', '.join(unknown)} unknown; choose from {', '.join(known)} "
            "or 'all'"
        )
    return names


def load_dataset(name: str, data_dir: str | None) -> RegressionDataset:
    if name == EMBEDDED:
        return load_diabetes_splits()
    return load_uci(name, data_dir)


# flags that default to a preset
TUNED = ("learning_rate", "prior_std", "posterior_std", "step_size")


# Flags that map one to one onto config fields; a method takes those its config has.
CONFIG_FLAGS = (
    "iterations", "noise_std", "kl_weight", "test_samples", "seed", "chunk_size",
    "correlation_learning_rate", "compile", "device", "burn_in", "thinning",
)  # fmt: skip


def _config_from(args: argparse.Namespace, method: str) -> TrainConfig:
    """The run's config: explicit flags, else the data set's preset (``regression.presets``),
    else the config's defaults; says on stderr which preset values it used. A flag that
    ``method`` does not take (``--burn-in`` for mf) is left out of its config."""
    accepted = method_fields(method)
    values, source = preset(getattr(args, "dataset", ""), method)
    chosen = {name: getattr(args, name) for name in TUNED if getattr(args, name) is not None}
    used = {name: v for name, v in values.items() if name not in chosen and name in accepted}
    if used:
        shown = ", ".join(f"{name}={value:g}" for name, value in used.items())
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in used)
        print(f"{method}: {shown} ({source}; {flags} to override)", file=sys.stderr)
    given = {name: getattr(args, name) for name in CONFIG_FLAGS if getattr(args, name) is not None}
    given |= {"hidden": tuple(args.hidden), "activation": args.activation, **used, **chosen}
    return method_config(method, **{k: v for k, v in given.items() if k in accepted})


def run_methods(
    dataset: RegressionDataset, args: argparse.Namespace, methods: list[str]
) -> list[RunResult]:
    """Every method on ``args.splits``; with ``--save-model`` every trained stack is saved."""
    save_models = getattr(args, "save_model", None)
    results = []
    for method in methods:
        config = _config_from(args, method)
        folders: list[Path | None] = []
        results.append(
            run_splits(
                dataset, args.splits, config, progress=not args.no_progress,
                on_stack=lambda stack, folders=folders: folders.append(stack.saved_to),
                save_models=save_models,
            )
        )  # fmt: skip
        if save_models is not None:
            print("saved: " + ", ".join(str(f) for f in folders), file=sys.stderr)
    return results


def _print_results(results: list[RunResult], as_json: bool, note: str | None) -> None:
    if as_json:
        payload = [to_json(r) for r in results]
        print(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2))
        return
    with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 120):
        if note:
            print(note)
        for result in results:
            stats = summary(result)
            print(f"\n{result.dataset}, {result.config.method.upper()}")
            print(split_table(result).to_string())
            ll, rmse = stats["test_log_likelihood"], stats["test_rmse"]
            print(
                f"mean +- standard error over {len(result.splits)} splits: "
                f"test LL {ll['mean']:.3f} +- {ll['standard_error']:.3f}, "
                f"RMSE {rmse['mean']:.3f} +- {rmse['standard_error']:.3f}"
            )
        if len(results) > 1:
            print(f"\n{results[0].dataset}: comparison (original target units)")
            print(comparison_table(results).to_string())


def command_uci(args: argparse.Namespace) -> None:
    dataset = load_dataset(args.dataset, args.data_dir)
    _print_results(run_methods(dataset, args, args.method), args.json, None)


def command_diagnose_pruning(args: argparse.Namespace) -> None:
    saved = load_model(args.model)
    dataset, inputs = None, None
    if args.csv is not None:
        raise ValueError(f"give the table as --data {args.csv} (as vbnn fit and compare do)")
    if args.data is not None:
        if args.target is None:
            raise ValueError("--data needs --target (the column the model predicts)")
        x, _, _ = read_table(args.data, args.target)
        scalers = saved.metadata
        if "x_mean" in scalers:  # saved by BayesianRegressor / vbnn fit: its own scalers
            x = (x - np.asarray(scalers["x_mean"])) / np.asarray(scalers["x_scale"])
        else:
            mean, scale = standard_scale(x)
            x = (x - mean) / scale
        inputs = torch.as_tensor(x)
    elif saved.dataset is None:
        raise ValueError(f"{args.model}: the model names no UCI data set; give its training "
                         "inputs with --data FILE --target COLUMN")  # fmt: skip
    else:
        dataset = load_dataset(saved.dataset, args.data_dir)
    report = diagnose_saved(saved, dataset, args.out, inputs=inputs)
    with pd.option_context("display.float_format", "{:.4f}".format, "display.width", 160):
        if args.units:
            for split, table in report.units.items():
                print(f"\nmodel {split}: per hidden unit")
                print(table.to_string())
        where = saved.dataset or args.data
        print(f"\n{saved.config.method.upper()} on {where}: pruned hidden units")
        print(report.counts.to_string(index=False))
    if is_paper_setting(saved):
        print(f"(paper, MF on boston: {PAPER_PRUNED} of {PAPER_UNITS})")
    for path in report.written:
        print(f"wrote {path}")


def command_diagnose_report(args: argparse.Namespace) -> None:
    report = diagnose_estimator(args.model, args.data, args.target, samples=args.samples)
    print(report.to_markdown() if args.markdown else report)
    for path in write_report(report, args.json, args.figure):
        print(f"wrote {path}")


def command_demo(args: argparse.Namespace) -> None:
    note = None
    try:
        dataset = load_uci("boston", args.data_dir)
    except DataError as error:
        dataset = load_diabetes_splits()
        note = (
            f"boston not available ({error}).\nDemo runs on the embedded default: scikit-learn's "
            "diabetes data (442 rows, 10 inputs), 20 seeded 90/10 splits."
        )
        print(note, file=sys.stderr)
    args.dataset = dataset.name  # the presets of boston (none for the embedded default)
    _print_results(run_methods(dataset, args, list(TABLE1_METHODS)), args.json, note)


def command_download(args: argparse.Namespace) -> None:
    names = args.names or list(DATASETS)
    for name in names:
        if name in CIFAR_NAMES:  # the official archive from the CIFAR page, md5-checked
            folder = download_cifar(name, args.data_dir)
        else:
            folder = download(name, args.data_dir, args.base_url)
        print(f"{name}: downloaded and verified -> {folder}")


def command_check(args: argparse.Namespace) -> None:
    print(f"data directory: {resolve_data_dir(args.data_dir)}")
    for status in check(args.data_dir):
        print(f"{status.name:<9} {status.status:<40} {status.folder}")


def _add_training_flags(parser: argparse.ArgumentParser) -> None:
    defaults, sgld = VIConfig(), SGLDConfig()
    parser.add_argument("--splits", type=parse_splits, default=None, help="e.g. 0-19 (all)")
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help=f"{UCI_ITERATIONS}; ES {EARLY_STOPPING_ITERATIONS}",
    )
    preset_note = "default: the data set's tuned preset, else"
    parser.add_argument("--learning-rate", type=float, default=None,
                        help=f"Adam step ({preset_note} {defaults.learning_rate})")  # fmt: skip
    parser.add_argument("--prior-std", type=float, default=None,
                        help=f"prior std ({preset_note} {defaults.prior_std})")  # fmt: skip
    parser.add_argument(
        "--posterior-std",
        type=float,
        default=None,
        help="VI: the weights' posterior std at the start (MF, FC); GD keeps it fixed "
        f"({preset_note} {defaults.posterior_std}; GD {GD_POSTERIOR_STD})",
    )
    parser.add_argument("--noise-std", type=float, default=None, help="fix the noise std")
    parser.add_argument("--kl-weight", type=float, default=None, help=f"VI ({defaults.kl_weight})")
    parser.add_argument("--hidden", type=int, nargs="+", default=list(defaults.hidden))
    parser.add_argument(
        "--activation", choices=[a.value for a in Activation], default=defaults.activation.value
    )
    parser.add_argument("--test-samples", type=int, default=None,
                        help=f"VI: predictive samples ({defaults.test_samples})")  # fmt: skip
    parser.add_argument("--step-size", type=float, default=None,
                        help=f"SGLD: eta, eps_0 = eta / N ({preset_note} "
                        f"{sgld.step_size})")  # fmt: skip
    parser.add_argument(
        "--correlation-learning-rate",
        type=float,
        default=None,
        help="VI: Adam rate of the correlation parameters (FC's off-diagonal Cholesky entries, "
        "the low-rank factor; default: the learning rate)",
    )
    add_runtime_arguments(parser)
    parser.add_argument("--burn-in", type=int, default=None, help="SGLD (a fifth of the steps)")
    parser.add_argument("--thinning", type=int, default=None, help="SGLD (100 samples kept)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--chunk-size", type=int, default=None, help="models per batch (auto)")
    parser.add_argument("--data-dir", default=None, help="overrides $VBNN_DATA_DIR")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def command_fit(args: argparse.Namespace) -> None:
    """Seeded train/test split of the user's table, BayesianRegressor (BayesianClassifier when
    the target column holds class names), test metrics."""
    if args.csv is not None:
        raise ValueError(f"give the table as --data {args.csv} (as vbnn compare does)")
    if args.data is None:
        raise ValueError("--data FILE: the CSV table to fit")
    x, y, columns = read_table(args.data, args.target, class_names=True)
    if not 0 < args.test_fraction < 1:
        raise ValueError(f"--test-fraction {args.test_fraction}: must be in (0, 1)")
    order = np.random.default_rng(args.seed).permutation(len(y))
    test = order[: max(1, round(args.test_fraction * len(y)))]
    train = order[len(test) :]
    if len(train) < 2:
        raise ValueError(f"{args.data}: {len(y)} rows leave too few for training")
    if y.dtype.kind == "U":
        _fit_classifier(args, x, y, columns, train, test)
        return
    estimator = BayesianRegressor(family=args.family, hidden=tuple(args.hidden),
                                  iterations=args.iterations, seed=args.seed)  # fmt: skip
    print(f"fitting {estimator!r} on {len(train)} rows, testing on {len(test)}; inputs "
          f"{columns}, target {args.target!r}", file=sys.stderr)  # fmt: skip
    estimator.fit(x[train], y[train])
    mean = estimator.predict(x[test])
    rmse = float(np.sqrt(np.mean((mean - y[test]) ** 2)))
    print(f"test log-likelihood {estimator.score(x[test], y[test]):.3f} nats, RMSE {rmse:.4g} "
          f"({len(test)} rows)")  # fmt: skip
    if args.save:
        print(f"saved to {estimator.save(args.save)}")


# Parameters: the command's arguments and the table and split that ``command_fit`` made
def _fit_classifier(
    args: argparse.Namespace,
    x: np.ndarray,
    y: np.ndarray,
    columns: list[str],
    train: np.ndarray,
    test: np.ndarray,
) -> None:
    """A BayesianClassifier (its default epochs; ``--iterations`` counts regression steps) on a
    target of class names; prints the test log-likelihood, the accuracy and the class order."""
    estimator = BayesianClassifier(family=args.family, hidden=tuple(args.hidden), seed=args.seed)
    print(f"fitting {estimator!r} on {len(train)} rows, testing on {len(test)}; inputs "
          f"{columns}, target {args.target!r} (class names)", file=sys.stderr)  # fmt: skip
    estimator.fit(x[train], y[train])
    unseen = sorted(set(y[test]) - set(estimator.classes_))
    if unseen:
        raise ValueError(f"--target {args.target!r}: test rows hold classes {unseen} that no "
                         "training row holds; use more rows or another --seed")  # fmt: skip
    accuracy = float(np.mean(estimator.predict(x[test]) == y[test]))
    print(f"test log-likelihood {estimator.score(x[test], y[test]):.3f} nats, accuracy "
          f"{accuracy:.3f} ({len(test)} rows); classes, in the order of predict_proba's "
          f"columns: {', '.join(estimator.classes_)}")  # fmt: skip
    if args.save:
        print(f"saved to {estimator.save(args.save)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vbnn", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    uci = commands.add_parser("uci", help="train and evaluate on a UCI data set's splits")
    uci.add_argument("--dataset", required=True, choices=[*DATASETS, EMBEDDED])
    uci.add_argument(
        "--method",
        type=parse_methods,
        default=["mf"],
        help="es,map,mf,gd,fc,sgld or all (Table 1); any other family name (vd-layer, ...) "
        "is fitted by VI",
    )
    _add_training_flags(uci)
    uci.add_argument("--save-model", default=None, metavar="DIR", help="save the trained stacks")
    uci.set_defaults(handler=command_uci)

    fit = commands.add_parser("fit", help="fit a BayesianRegressor to your own CSV table")
    fit.add_argument("--data", default=None, metavar="FILE", help="CSV table with a header")
    fit.add_argument("--csv", default=None, help=argparse.SUPPRESS)  # the old spelling: an error
    fit.add_argument("--target", required=True, metavar="COLUMN", help="the column to predict")
    fit.add_argument("--family", choices=list(FAMILIES), default="mf")
    fit.add_argument("--hidden", type=int, nargs="*", default=[50], help="hidden widths")
    fit.add_argument("--iterations", type=int, default=ESTIMATOR_ITERATIONS)
    fit.add_argument("--test-fraction", type=float, default=0.2, help="rows held out (seeded)")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--save", default=None, metavar="DIR", help="save the fitted estimator")
    fit.set_defaults(handler=command_fit)

    compare = commands.add_parser("compare", help="which family for my data? families x folds",
                                  description=compare_command.DESCRIPTION)  # fmt: skip
    compare_command.add_arguments(compare)
    compare.set_defaults(handler=compare_command.run)

    demo = commands.add_parser("demo", help="all six methods on boston's 20 splits")
    _add_training_flags(demo)
    demo.set_defaults(handler=command_demo)

    data = commands.add_parser("data", help="download or check the UCI files")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    fetch = data_commands.add_parser("download", help="fetch, verify checksums, write atomically")
    fetch.add_argument(
        "names", nargs="*", metavar="NAME", help="UCI names or cifar10, cifar100 (default: all UCI)"
    )
    fetch.add_argument("--base-url", default=DEFAULT_BASE_URL)
    fetch.add_argument("--data-dir", default=None)
    fetch.set_defaults(handler=command_download)
    status = data_commands.add_parser("check", help="which sets are present and verified")
    status.add_argument("--data-dir", default=None)
    status.set_defaults(handler=command_check)

    diagnose = commands.add_parser("diagnose", help="diagnostics of a saved model")
    diagnoses = diagnose.add_subparsers(dest="diagnosis", required=True)
    pruning = diagnoses.add_parser("pruning", help="over-pruned hidden units (Figures 2, 5)")
    pruning.add_argument("--model", required=True, metavar="DIR", help="from uci --save-model")
    pruning.add_argument("--data-dir", default=None, help="overrides $VBNN_DATA_DIR")
    pruning.add_argument("--out", default=None, metavar="DIR", help="write CSVs and figures")
    pruning.add_argument("--units", action="store_true", help="print the per-unit tables")
    pruning.add_argument("--data", default=None, metavar="FILE", help="training table (own data)")
    pruning.add_argument("--csv", default=None, help=argparse.SUPPRESS)  # old spelling: an error
    pruning.add_argument("--target", default=None, metavar="COLUMN", help="its target column")
    pruning.set_defaults(handler=command_diagnose_pruning)
    report = diagnoses.add_parser(
        "report", help="vbnn.diagnose of a saved BayesianRegressor or BayesianClassifier"
    )
    report.add_argument("--model", required=True, metavar="DIR", help="from the estimator's save")
    report.add_argument("--data", required=True, metavar="CSV", help="table to diagnose on")
    report.add_argument("--target", required=True, metavar="COLUMN", help="its target column")
    report.add_argument("--samples", type=int, default=32, help="weight samples (ensemble)")
    report.add_argument("--markdown", action="store_true", help="print the report as markdown")
    report.add_argument("--json", default=None, metavar="FILE", help="write the report as JSON")
    report.add_argument("--figure", default=None, metavar="FILE", help="write the report's plot")
    report.set_defaults(handler=command_diagnose_report)

    sweep = commands.add_parser("sweep", help=sweep_command.DESCRIPTION,
                                description=sweep_command.DESCRIPTION)  # fmt: skip
    sweep_command.add_arguments(sweep)
    sweep.set_defaults(handler=sweep_command.run)
    _add_installed_commands(commands)
    return parser


def _add_installed_commands(commands: argparse._SubParsersAction) -> None:
    """A subcommand for every entry point of ``COMMANDS_GROUP``; one that fails to import, or a
    ``PACKAGED_COMMANDS`` name that no package provides, becomes a subcommand that says why it
    cannot run and what to install.

    An entry point of the group names a module (``reproduce = "package.module"``) that defines
    ``DESCRIPTION: str`` (the help line), ``add_arguments(parser: argparse.ArgumentParser) ->
    None`` (its flags) and ``run(args: argparse.Namespace) -> None`` (the job); the entry
    point's name is the subcommand's.

    Raises:
        ValueError: an entry point is named like a built-in command (the entry point named).
    """
    found = {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}
    for name in sorted(found.keys() | PACKAGED_COMMANDS.keys()):
        help_line, install = PACKAGED_COMMANDS.get(name) or (f"from {found[name].value}", "")
        unavailable = "not installed"
        if name in commands.choices:
            raise ValueError(f"entry point {name!r} of {COMMANDS_GROUP!r} ({found[name].value}) "
                             "names a built-in vbnn command")  # fmt: skip
        try:
            module = found[name].load() if name in found else None
        except ImportError as error:
            module, unavailable = None, "failed to import"
            install = (f"entry point {name!r} of {COMMANDS_GROUP!r} ({found[name].value}) "
                       f"failed to import: {type(error).__name__}: {error}")  # fmt: skip
        if module is None:
            missing = commands.add_parser(name, help=f"{help_line} ({unavailable})",
                                          description=install)  # fmt: skip
            missing.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            missing.set_defaults(handler=_not_installed(name, install))
            continue
        command = commands.add_parser(name, help=module.DESCRIPTION,
                                      description=module.DESCRIPTION)  # fmt: skip
        module.add_arguments(command)
        command.set_defaults(handler=module.run)


def _not_installed(name: str, install: str) -> Callable[[argparse.Namespace], None]:
    """The handler of a subcommand whose package is missing: an error saying what to install."""

    def handler(args: argparse.Namespace) -> None:
        raise ValueError(f"vbnn {name}: {install}")

    return handler


@contextmanager
def _progress_lines_to_stderr() -> Iterator[None]:
    """The library's progress lines (``logging`` at INFO under ``vbnn``: a reference chain's
    tuning stages and checkpoints) on stderr while a command runs."""
    logger, handler = logging.getLogger("vbnn"), logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("vbnn: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _progress_lines_to_stderr():
            args.handler(args)
    except (DataError, FileNotFoundError, NonFiniteLossError, ValueError) as error:
        print(f"vbnn: error: {error}", file=sys.stderr)
        return 2
    except SweepError as error:  # the finished units are stored; a re-run retries the rest
        print(f"vbnn: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
