"""``vbnn reproduce overpruning``: Table 1 and Figures 1-5 of Trippe & Turner 2017.

Protocol: the paper's appendix A. For every data set and method: tune on training data only (Optuna,
``vbnn.regression.tuning``), then train and evaluate on the 20 standard splits; every finished chunk
of splits is stored in ``OUT/results.sqlite`` (with the Optuna studies), so re-running the command
resumes a killed run and recomputes nothing. Then the table (``table1.md``, ``table1.csv``), the bar
chart (``figure1.png``) and Figures 2-5 are written.

    vbnn reproduce overpruning --out results/overpruning           # the full run
    vbnn reproduce overpruning --quick --out results/overpruning-quick
    vbnn reproduce overpruning --extension nine-sets --out results/overpruning-nine-sets
    vbnn reproduce overpruning --pruning-rules --out reproductions/overpruning
    vbnn reproduce overpruning --executor ray --address HOST:6379   # units on a Ray cluster

``--extension nine-sets`` runs the same machinery on kin8nm, naval and protein (splits 0-4,
protein 100 hidden units; ``extension``) and writes ``table1_extension.md`` beside published
PBP and deep-ensembles values; ``--pruning-rules`` counts boston MF's pruned units under every
counting rule and two priors (``pruning_rules``). Neither touches ``table1.md``.

The studies, then the chunks of splits, are units of an executor (``vbnn.sweeps``, docs/sweeps.md):
by default worker processes, one a core, each unit on one torch thread as on every executor, so
the stored numbers are those of ``--executor local`` (this process, one unit after another).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from vbnn.data.splits import parse_splits
from vbnn.regression.runs import TABLE1_METHODS, RunResult
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
from vbnn_lab.overpruning import figures as overpruning_figures
from vbnn_lab.overpruning.extension import (
    EXTENSION_DATASETS,
    EXTENSION_SPLITS,
    hidden_width,
    write_extension_table,
)
from vbnn_lab.overpruning.pruning_rules import count_rules
from vbnn_lab.overpruning.table1 import summary_from_results, write_table1

DESCRIPTION = "Trippe & Turner 2017: tuned Table 1 with SGLD, Figures 1-5"

DATASETS = ("boston", "concrete", "energy", "power", "wine", "yacht")
METHODS = TABLE1_METHODS


@dataclass(frozen=True)
class Plan:
    """What one run covers; ``quick`` cuts it to about five minutes on 2 cores."""

    datasets: tuple[str, ...]
    methods: tuple[str, ...]
    splits: tuple[int, ...] | None  # None: all 20
    iterations: int | None  # None: the paper's (5000, ES 2000)
    trials: int
    batch: int
    figure_iterations: int | None
    cuts: tuple[str, ...]


FULL = Plan(DATASETS, METHODS, None, None, 30, 10, None, ())
QUICK = Plan(
    ("boston", "concrete", "energy", "wine", "yacht"),
    METHODS,
    (0, 1, 2, 3, 4),
    1000,
    10,
    10,
    1000,
    (
        "data sets: all but power (paper: six; power's 8,600 training rows cost most)",
        "splits 0-4 (paper: 20)",
        "1000 iterations a run, ES 1000 (paper: 5000, ES 2000)",
        "10 tuning candidates per method, one stack (full run: 30)",
        "Figures 2-5: 1000 iterations, one split (paper: 5000)",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_arguments(
        parser, "results/overpruning", "about 5 minutes; says what it cuts", DATASETS, METHODS,
        "e.g. 0-4 (default: all 20; quick 0-4)",
    )  # fmt: skip
    parser.add_argument(
        "--tune", choices=["once", "per-split", "none"], default="once", help="tuning protocol"
    )
    parser.add_argument("--no-figures", action="store_true", help="Table 1 and Figure 1 only")
    parser.add_argument(
        "--extension",
        choices=["nine-sets"],
        default=None,
        help="kin8nm, naval, protein (splits 0-4) -> table1_extension.md, beyond the paper",
    )
    parser.add_argument(
        "--pruning-rules",
        action="store_true",
        help="only count boston MF's pruned units under every rule -> pruning_rules.md",
    )
    add_executor_arguments(parser, ExecutorKind.PROCESSES)  # independent units: every core


def _plan(args: argparse.Namespace) -> Plan:

    plan = QUICK if args.quick else FULL
    known = DATASETS
    if getattr(args, "extension", None) == "nine-sets":
        kept = tuple(c for c in plan.cuts if not c.startswith(("data sets", "splits", "Figures")))
        plan = replace(plan, datasets=EXTENSION_DATASETS, splits=EXTENSION_SPLITS, cuts=kept)
        known = EXTENSION_DATASETS
    if args.datasets:
        plan = replace(plan, datasets=tuple(args.datasets.split(",")))
    if args.methods:
        plan = replace(plan, methods=tuple(args.methods.split(",")))
    if args.splits:
        plan = replace(plan, splits=tuple(parse_splits(args.splits) or ()))
    if args.iterations:
        plan = replace(plan, iterations=args.iterations, figure_iterations=args.iterations)
    if args.trials:
        plan = replace(plan, trials=args.trials, batch=min(plan.batch, args.trials))
    unknown = sorted(set(plan.datasets) - set(known)) + sorted(set(plan.methods) - set(METHODS))
    if unknown:
        raise ValueError(f"--datasets/--methods: unknown {unknown}; choose from {known}, {METHODS}")
    return plan


def tuned_values(
    splits: list[int], protocol: str, chosen: Callable[[int], dict[str, float]]
) -> dict[int, dict[str, float]]:
    """Each split's hyper-parameter values under the protocol (empty dicts for 'none'), given
    ``chosen``: a tuned split -> the best values of its complete study."""

    if protocol == "none":
        return {k: {} for k in splits}
    if protocol == "once":
        values = chosen(0)
        return {k: values for k in splits}
    return {k: chosen(k) for k in splits}


# the splits whose studies each tuning protocol uses
TUNED_SPLITS = {"none": lambda splits: [], "once": lambda splits: [0], "per-split": list}


def plan_jobs(args: argparse.Namespace, plan: Plan) -> list[Job]:
    """(data set, config, splits) of every (data set, method) the plan covers."""

    def shapes(name: str) -> list[tuple[str, tuple[int, ...]]]:
        return [(method, (hidden_width(name),)) for method in plan.methods]

    return uci_jobs(args, plan.datasets, plan.splits, plan.iterations, shapes)


def print_status(args: argparse.Namespace, plan: Plan, out: Path) -> None:
    """``--status``: candidates and split runs stored in ``out``, per data set and method."""
    tuning = TuningConfig(trials=plan.trials, batch=plan.batch, seed=args.seed)

    def provenance(storage, dataset, config, splits) -> dict:
        values = tuned_values(splits, args.tune,
                              lambda k: tune(dataset, k, config, tuning, storage))  # fmt: skip
        return {"tune": args.tune, "trials": plan.trials, "values": values}

    heading = f" (tuning: {args.tune})"
    print_progress(out, plan_jobs(args, plan), TUNED_SPLITS[args.tune], tuning, provenance, heading)


def run_table(args: argparse.Namespace, plan: Plan, out: Path) -> list:
    """Tune, train and evaluate every (data set, method) as units on the chosen executor (all
    studies first, then the chunks of splits); the driver alone writes the database."""
    database_path = out / "results.sqlite"
    storage = optuna_storage(database_path)
    settings = settings_from(args)
    progress = not args.no_progress
    jobs = plan_jobs(args, plan)
    tuning = TuningConfig(trials=plan.trials, batch=plan.batch, seed=args.seed)
    tuned = TUNED_SPLITS[args.tune]
    studies = [(dataset, k, config) for dataset, config, splits in jobs for k in tuned(splits)]
    chosen = iter(tune_missing(storage, studies, tuning, settings, progress=progress))
    runs = []
    for dataset, config, splits in jobs:  # each job's studies in the order listed above
        found = {k: next(chosen) for k in tuned(splits)}
        values = tuned_values(splits, args.tune, found.__getitem__)
        extra = {"tune": args.tune, "trials": plan.trials, "values": values}
        runs.append(Runs(dataset.name, config, tuple(splits), extra,
                         f"{dataset.name} {config.method}"))  # fmt: skip
    datasets = {dataset.name: dataset for dataset, _, _ in jobs}
    tuned_per_split = None if args.tune == "none" else (lambda entry: entry.extra["values"])
    build = SplitUnits(datasets, values=tuned_per_split, cpus=args.cpus_per_unit)
    with ResultsDatabase(database_path) as database:
        stored = train_missing(database, runs, build, settings, description="table 1",
                               progress=progress)  # fmt: skip
    results = []
    for entry in stored:
        result = RunResult(dataset=entry.runs.dataset, config=entry.runs.config,
                           splits=entry.results)  # fmt: skip
        shown = entry.runs.extra["values"][entry.runs.replicates[0]]
        results.append(replace(result, notes=(json.dumps(shown),)))
    return results


def run(args: argparse.Namespace) -> None:

    out = Path(args.out)
    if args.status:  # reads only: no folder made, nothing written
        print_status(args, _plan(args), out)
        return
    out.mkdir(parents=True, exist_ok=True)
    if args.pruning_rules:
        splits = parse_splits(args.splits) if args.splits else range(20)
        count_rules(out, args.data_dir, iterations=args.iterations or 5000, splits=list(splits),
                    seed=args.seed, progress=not args.no_progress)  # fmt: skip
        print((out / "pruning_rules.md").read_text())
        return
    plan = _plan(args)
    extension = args.extension is not None
    start = time.perf_counter()
    if plan.cuts:
        print("quick mode: " + "; ".join(plan.cuts), file=sys.stderr)
    results = run_table(args, plan, out)
    chosen = [
        f"{r.dataset} {r.config.method}: {r.notes[0]} (tuning: {args.tune}, split 0 shown)"
        for r in results
    ]
    notes = [
        *(f"Quick mode cut: {c}." for c in plan.cuts),
        "Hyper-parameters chosen on validation data carved from training rows:",
        *chosen,
    ]
    if extension:
        written = write_extension_table(summary_from_results(results), out, notes=notes)
    else:
        written = write_table1(summary_from_results(results), out, notes=notes)
    if not args.no_figures and not extension:
        quick = bool(plan.cuts)
        figure_args = {"iterations": plan.figure_iterations, "splits": [0] if quick else None}
        written += overpruning_figures.figure2_5(
            out, quick=quick, data_dir=args.data_dir, progress=not args.no_progress, **figure_args
        )
        written += overpruning_figures.figure3(out, quick, plan.figure_iterations, args.seed)
        written += overpruning_figures.figure4(
            out, quick=quick, data_dir=args.data_dir, progress=not args.no_progress, **figure_args
        )
    seconds = time.perf_counter() - start
    info = {"seconds": round(seconds, 1), "plan": plan.__dict__, "tune": args.tune}
    suffix = "_extension" if extension else ""
    write_atomic(out / f"run_info{suffix}.json", json.dumps(info, indent=2, default=str))
    print((out / f"table1{suffix}.md").read_text())
    print(f"wrote {len(written) + 1} files to {out} in {seconds / 60:.1f} min", file=sys.stderr)
