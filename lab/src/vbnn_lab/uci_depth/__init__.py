"""``vbnn reproduce uci-depth``: does mean-field's gap to FC and GD shrink with depth on UCI?

Farquhar et al. 2020 (section 5) argues that the mean-field restriction costs less in deeper
networks; Trippe & Turner 2017 measured the gap with one hidden layer only. This experiment trains
ES (the non-Bayesian reference), MF, GD and FC with 1, 2 and 3 hidden layers of 50 tanh units on the
six paper sets and their 20 splits (FC only at the depths of ``--fc-depths``, by default 1: its full
covariance over the 2,550 weights of a 50 x 50 layer makes a step far costlier than MF's; measured:
reproductions/uci-depth/README.md), every (data set, method, depth) tuned as in Table 1 (Optuna TPE
on validation rows carved from split 0's training rows, ``--tune once``; the hidden widths enter the
config hash and the study names). Stored per split: test log-likelihood, RMSE and the pruned-unit
count of every hidden layer (``diagnostics.layer_pruning``). Every finished chunk is in
``OUT/results.sqlite``: a second invocation trains only what is missing.

Writes ``depth_table.md`` / ``depth_table.csv`` (test LL and pruned units per layer),
``depth_gaps.csv`` (MF - FC and MF - GD per depth, paired over splits) and ``depth_figure.png``.

    vbnn reproduce uci-depth --out results/uci-depth   # 6 sets x ES, MF, GD x 3 depths + FC x 1
    vbnn reproduce uci-depth --quick --out results/uci-depth-quick
    vbnn reproduce uci-depth --executor ray --address HOST:6379   # units on a Ray cluster

The studies, then the chunks of splits, are units of an executor (``vbnn.sweeps``, docs/sweeps.md):
by default worker processes, one a core, each unit on one torch thread as on every executor, so the
stored numbers are those of ``--executor local``; the driver alone writes the database.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from vbnn.data.splits import parse_splits
from vbnn.regression.runs import RunResult
from vbnn.regression.split_units import (
    Job,
    SplitUnits,
    add_study_arguments,
    print_progress,
    uci_jobs,
)
from vbnn.regression.tuning import TuningConfig, tune
from vbnn.regression.tuning_driver import tune_missing
from vbnn.stores.atomic import write_atomic
from vbnn.stores.results_db import ResultsDatabase, optuna_storage
from vbnn.sweeps.contracts import ExecutorKind
from vbnn.sweeps.driver import Runs, train_missing
from vbnn.sweeps.executors import add_executor_arguments, settings_from
from vbnn_lab.uci_depth.report import pruned_counts_metric, write_report

DESCRIPTION = (
    "Farquhar et al. 2020 sec. 5 on UCI: ES, MF, GD, FC with 1-3 hidden layers, "
    "pruned units per layer"
)

DATASETS = ("boston", "concrete", "energy", "power", "wine", "yacht")
METHODS = ("es", "mf", "gd", "fc")
DEPTHS = (1, 2, 3)
WIDTH = 50


@dataclass(frozen=True)
class Plan:
    """What one run covers; ``quick`` cuts it to about three minutes on 2 cores."""

    datasets: tuple[str, ...]
    methods: tuple[str, ...]
    depths: tuple[int, ...]
    fc_depths: tuple[int, ...]  # FC's full covariance over a 50 x 50 layer costs far more than MF
    splits: tuple[int, ...] | None  # None: all 20
    iterations: int | None  # None: the paper's (5000, ES 2000)
    trials: int
    batch: int
    cuts: tuple[str, ...]


FULL = Plan(DATASETS, METHODS, DEPTHS, (1,), None, None, 30, 10, ())
QUICK = Plan(
    ("boston", "yacht"),
    METHODS,
    DEPTHS,
    (1,),
    (0, 1, 2),
    500,
    4,
    4,
    (
        "data sets: boston and yacht (full: the six paper sets)",
        "splits 0-2 (full: 20)",
        "500 iterations a run (full: 5000, ES 2000)",
        "4 tuning candidates per study (full: 30)",
        "FC at depth 1 only (as the full run by default; --fc-depths)",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_arguments(
        parser, "results/uci-depth", "about 3 minutes; says what it cuts", DATASETS, METHODS,
        "e.g. 0-4 (default: all 20)",
    )  # fmt: skip
    parser.add_argument("--depths", default=None, help="comma list of hidden layers (1,2,3)")
    parser.add_argument(
        "--fc-depths", default=None, help="depths at which FC runs (default 1: it is costly)"
    )
    add_executor_arguments(parser, ExecutorKind.PROCESSES)  # independent units: every core


def make_plan(args: argparse.Namespace) -> Plan:
    """The plan from the flags (quick or full, then each override); unknown names are named."""
    plan = QUICK if args.quick else FULL
    if args.datasets:
        plan = replace(plan, datasets=tuple(args.datasets.split(",")))
    if args.methods:
        plan = replace(plan, methods=tuple(args.methods.split(",")))
    if args.depths:
        plan = replace(plan, depths=tuple(int(d) for d in args.depths.split(",")))
    if args.fc_depths:
        plan = replace(plan, fc_depths=tuple(int(d) for d in args.fc_depths.split(",")))
    if args.splits:
        plan = replace(plan, splits=tuple(parse_splits(args.splits) or ()))
    if args.iterations:
        plan = replace(plan, iterations=args.iterations)
    if args.trials:
        plan = replace(plan, trials=args.trials, batch=min(plan.batch, args.trials))
    unknown = sorted(set(plan.datasets) - set(DATASETS)) + sorted(set(plan.methods) - set(METHODS))
    if unknown:
        raise ValueError(f"--datasets/--methods: unknown {unknown}; choose from {DATASETS}, "
                         f"{METHODS}")  # fmt: skip
    if not plan.depths or min(plan.depths) < 1:
        raise ValueError(f"--depths: hidden layer counts must be >= 1, got {plan.depths}")
    return plan


def plan_jobs(args: argparse.Namespace, plan: Plan) -> list[Job]:
    """(data set, config, splits) of every (data set, depth, method) the plan covers."""

    def shapes(name: str) -> list[tuple[str, tuple[int, ...]]]:
        return [(method, (WIDTH,) * depth) for depth in plan.depths for method in plan.methods
                if method != "fc" or depth in plan.fc_depths]  # fmt: skip

    return uci_jobs(args, plan.datasets, plan.splits, plan.iterations, shapes)


def provenance(chosen: dict[str, float], splits: list[int], plan: Plan) -> dict:
    """The ``extra`` a configuration's runs are stored with: split 0's values for every split."""
    return {"tune": "once", "trials": plan.trials, "values": {k: chosen for k in splits}}


def print_status(args: argparse.Namespace, plan: Plan, out: Path) -> None:
    """``--status``: candidates and split runs stored in ``out``, per data set, method, depth."""
    tuning = TuningConfig(trials=plan.trials, batch=plan.batch, seed=args.seed)

    def stored_with(storage, dataset, config, splits) -> dict:
        return provenance(tune(dataset, 0, config, tuning, storage), splits, plan)

    print_progress(out, plan_jobs(args, plan), lambda splits: [0], tuning, stored_with)


def run_grid(args: argparse.Namespace, plan: Plan, out: Path) -> list[dict]:
    """Tune, train and evaluate every (data set, method, depth) as units on the chosen executor
    (all studies first, then the chunks of splits); from/into the database.

    Returns one record per (data set, method, depth): its per-split results and stored metrics.
    """
    database_path = out / "results.sqlite"
    storage = optuna_storage(database_path)
    settings = settings_from(args)
    progress = not args.no_progress
    tuning = TuningConfig(trials=plan.trials, batch=plan.batch, seed=args.seed)
    jobs = plan_jobs(args, plan)
    studies = [(dataset, 0, config) for dataset, config, _ in jobs]  # split 0's, as in Table 1
    chosen_values = tune_missing(storage, studies, tuning, settings, progress=progress)
    runs = []
    for (dataset, config, splits), chosen in zip(jobs, chosen_values, strict=True):
        label = f"{dataset.name} {config.method} depth {len(config.hidden)}"
        runs.append(Runs(dataset.name, config, tuple(splits), provenance(chosen, splits, plan),
                         label))  # fmt: skip
    build = SplitUnits(
        {dataset.name: dataset for dataset, _, _ in jobs},
        values=lambda entry: entry.extra["values"],
        stack_metrics=lambda entry: pruned_counts_metric(entry.config, entry.extra["values"]),
        cpus=args.cpus_per_unit,
    )
    with ResultsDatabase(database_path) as database:
        stored = train_missing(database, runs, build, settings, description="uci depth",
                               progress=progress)  # fmt: skip
    outputs = []
    for entry, chosen in zip(stored, chosen_values, strict=True):
        dataset, config = entry.runs.dataset, entry.runs.config
        result = RunResult(dataset=dataset, config=config, splits=entry.results)
        outputs.append({"dataset": dataset, "method": config.method, "depth": len(config.hidden),
                        "values": chosen, "result": result,
                        "metrics": dict(entry.metrics)})  # fmt: skip
    return outputs


def run(args: argparse.Namespace) -> None:
    plan = make_plan(args)
    out = Path(args.out)
    if args.status:  # reads only: no folder made, nothing written
        print_status(args, plan, out)
        return
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if plan.cuts:
        print("quick mode: " + "; ".join(plan.cuts), file=sys.stderr)
    records = run_grid(args, plan, out)
    notes = [f"Quick mode cut: {c}." for c in plan.cuts]
    written = write_report(records, out, notes)
    seconds = time.perf_counter() - start
    info = {"seconds": round(seconds, 1), "plan": plan.__dict__}
    write_atomic(out / "run_info.json", json.dumps(info, indent=2, default=str))
    print((out / "depth_table.md").read_text())
    print(f"wrote {len(written) + 1} files to {out} in {seconds / 60:.1f} min", file=sys.stderr)
