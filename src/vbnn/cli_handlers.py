"""The jobs of the ``vbnn`` subcommands that ``vbnn.cli`` defines: ``uci``, ``fit``, ``demo``,
``data download|check`` and ``diagnose pruning|report`` (``compare`` and ``sweep`` run in
``comparison.command`` and ``regression.sweep_command``).

``vbnn.cli`` builds the parser without importing this module, so ``vbnn --help`` loads none of
the libraries these jobs need (pandas, scikit-learn, SciPy); ``main`` imports it when one of
these subcommands runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.classification.estimator import BayesianClassifier
from vbnn.cli import EMBEDDED
from vbnn.comparison.run import compare
from vbnn.data import DATASETS, DataError, RegressionDataset, load_uci
from vbnn.data.cifar import CifarDataset, download_cifar
from vbnn.data.download import check, download
from vbnn.data.embedded import load_diabetes_splits
from vbnn.data.paths import resolve_data_dir
from vbnn.data.splits import standard_scale
from vbnn.data.table import read_table
from vbnn.diagnostics.saved import (
    PAPER_PRUNED,
    PAPER_UNITS,
    diagnose_estimator,
    diagnose_saved,
    is_paper_setting,
    write_report,
)
from vbnn.regression.engine import run_splits
from vbnn.regression.estimator import BayesianRegressor
from vbnn.regression.methods import method_config, method_fields, method_names
from vbnn.regression.presets import preset
from vbnn.regression.report import comparison_table, split_table, summary, to_json
from vbnn.regression.runs import TABLE1_METHODS, RunResult, TrainConfig
from vbnn.regression.saved_models import load_model

CIFAR_NAMES = [d.value for d in CifarDataset]


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
    """The engine's methods as batched stacks of splits; the methods that train a network (ivon,
    ensemble, laplace, ...) through ``vbnn.compare`` on the same splits, the MLP of
    ``comparison.table_network`` (the engine's protocol: full-batch steps)."""
    dataset = load_dataset(args.dataset, args.data_dir)
    engine = [name for name in args.method if name in method_names()]
    networks = [name for name in args.method if name not in engine]
    if engine:
        _print_results(run_methods(dataset, args, engine), args.json, None)
    if networks:
        _print_networks(dataset, args, networks)


def _print_networks(dataset: RegressionDataset, args: argparse.Namespace, names: list[str]) -> None:
    """``names`` compared on the splits of ``args.splits`` (all by default), untuned."""
    chosen = range(dataset.num_splits) if args.splits is None else args.splits
    settings = {
        "iterations": args.iterations,
        "test_samples": args.test_samples or 100,
        "hidden": tuple(args.hidden),
        "tune": False,
        "seed": args.seed or 0,
    }
    result = compare(
        dataset.inputs,
        dataset.target,
        families=names,
        task="regression",
        splits=[dataset.splits[k] for k in chosen],
        progress=not args.no_progress,
        **{k: v for k, v in settings.items() if v is not None},
    )
    if args.json:
        print(result.summary.to_json(orient="index", indent=2))
        return
    print(f"\n{dataset.name}: {', '.join(names)} on {len(chosen)} splits (an MLP a split)")
    print(result.table.to_string())


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
