"""Variance networks (002_05369ebb4f396b47.txt, 003_6d46223d87d84c68.txt) on MNIST with LeNet-5.

Produces, each beside the published numbers of shared/reference/published.json:
  * Table 1 of 003: ELBO, data term, KL, mean-propagation and test-time-averaging accuracy with the
    first dense layer in each parameterization (zero-mean, layer, neuron, weight, additive);
  * Table 2 of 003, LeNet-5 rows: binary dropout vs the variance network (all layers layer-wise
    variational dropout), accuracy with 1 sample, deterministic, 20 samples;
  * appendix C of 003: tanh, no-bias LeNet-5 with zero-mean ("var") layers;
  * Fig. 1 of 003: the toy four-class problem with a two-neuron variance bottleneck;
  * Fig. 3 of 003 (phase transition), Figs. 3-5 of 002 (kappa histograms, count above
    log10 kappa0 = 1.5 per epoch, sparse ensembles), Fig. 5 of 003 (pruning by sigma).
Every finished training run is stored in OUT/runs/ (``vbnn.stores.unit_store``: settings, result
and weights) and reused when the same budget is re-run. With ``--executor ray`` the runs
(``variance_networks.runs``) train as Ray tasks first; the tables then read them back.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from vbnn.classification.training import ClassifierConfig, train_classifier
from vbnn.core.randomness import ModelGenerators
from vbnn.data.mnist import load_images
from vbnn.experiments.variance_networks.budget import BUDGETS, Budget, resolve_budget
from vbnn.experiments.variance_networks.runs import phase_run, run_missing, table_runs
from vbnn.experiments.variance_networks.tables import make_tables, phase_transition_only
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors.dropout import LogUniformPrior
from vbnn.stores.atomic import write_atomic
from vbnn.sweeps.executors import ExecutorKind, add_executor_arguments, settings_from

__all__ = ["BUDGETS", "DESCRIPTION", "Budget", "add_arguments", "run", "time_epochs"]

DESCRIPTION = "Variance networks (Neklyudov et al.): LeNet-5 tables, toy bottleneck, kappa"
DEFAULT_OUT = "results/variance-networks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="~5 min on a data subset")
    parser.add_argument("--size", choices=list(BUDGETS), default=None, help="overrides --quick")
    parser.add_argument("--epochs", type=int, default=None, help="override the budget's epochs")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", choices=["mnist", "fashion-mnist"], default="mnist")
    parser.add_argument(
        "--time-epoch", action="store_true", help="only time LeNet-5 steps and print epoch cost"
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--phase-only",
        action="store_true",
        help="only track the Table 1 layer-wise run per epoch (phase transition, kappa counts)",
    )
    parser.add_argument(
        "--log-alpha-lr",
        type=float,
        default=None,
        help="Adam step of log alpha (default: 1e-3 like the rest; a deviation, see "
        "reproductions/variance-networks/README.md)",
    )
    add_executor_arguments(parser)


def run(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    budget = resolve_budget(args)
    train_x, train_y = load_images(args.dataset, "train", args.data_dir)
    test_x, test_y = load_images(args.dataset, "test", args.data_dir)
    if args.time_epoch:
        time_epochs(train_x, train_y)
        return
    out = Path(args.out)
    started = time.perf_counter()
    data = (train_x[: budget.train_size], train_y[: budget.train_size],
            test_x[: budget.test_size], test_y[: budget.test_size])  # fmt: skip
    executor = settings_from(args)
    if executor.kind is not ExecutorKind.LOCAL:  # train the runs as units; the tables then read
        specs = [phase_run()] if args.phase_only else table_runs()
        run_missing(specs, budget, data, args.seed, out, executor)
    if args.phase_only:
        frame = phase_transition_only(out, budget, data, args.seed, not args.no_progress)
        rate = budget.log_alpha_learning_rate or 1e-3
        print(f"budget {budget.name}, {budget.epochs} epochs, log alpha learning rate {rate}:")
        print(frame.round(2).to_string(index=False))
        return
    make_tables(out, budget, data, args.seed, progress=not args.no_progress)
    seconds = time.perf_counter() - started
    note = (
        f"budget {budget.name}: {budget.train_size} training and {budget.test_size} test images"
        f" of {args.dataset}, {budget.epochs} epochs, K = {budget.samples}, log alpha learning"
        f" rate {budget.log_alpha_learning_rate or 1e-3}; wall {seconds:.0f} s"
    )
    record = {"budget": asdict(budget), "seconds": seconds, "seed": args.seed,
              "dataset": args.dataset}  # fmt: skip
    write_atomic(out / "run.json", json.dumps(record, indent=1))
    summary = (out / "summary.md").read_text()
    write_atomic(out / "summary.md", f"{note}\n\n{summary}")
    print(note)
    print(summary)
    if budget.name != "full":
        print(f"NOTE: {budget.name} run on a data subset; numbers are not the paper's protocol.")


def time_epochs(train_x, train_y, steps: int = 30) -> None:
    """Time ``steps`` minibatch steps (batch 100) of LeNet-5 configurations; print s / epoch."""
    count = steps * 100
    for label, families in (("variance (4 x vd-layer)", ("vd-layer",) * 4),
                            ("dense1 only (Table 1)", ("deterministic", "deterministic",
                                                       "vd-layer", "deterministic"))):  # fmt: skip
        model = LeNet5(LeNetConfig(families=families), ModelGenerators([0]))
        seconds = train_classifier(model, LogUniformPrior(), train_x[:count], train_y[:count],
                                   ClassifierConfig(epochs=1), progress=False)[0]  # fmt: skip
        per_epoch = seconds / count * len(train_y)
        print(f"{label}: {seconds / steps:.3f} s/step, {per_epoch:.0f} s per epoch of "
              f"{len(train_y)} images (threads={torch.get_num_threads()})")  # fmt: skip
