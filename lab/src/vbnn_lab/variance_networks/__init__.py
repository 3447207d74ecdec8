"""Variance networks (Neklyudov et al. 2018, Neklyudov et al. 2019) on MNIST with LeNet-5.

Produces, each beside the published numbers of shared/reference/published.json:
  * Table 1 of Neklyudov et al. 2019: ELBO, data term, KL, mean-propagation and test-time-averaging
  accuracy with the
    first dense layer in each parameterization (zero-mean, layer, neuron, weight, additive);
  * Table 2 of Neklyudov et al. 2019, LeNet-5 rows: binary dropout vs the variance network (all
  layers layer-wise
    variational dropout), accuracy with 1 sample, deterministic, 20 samples;
  * appendix C of Neklyudov et al. 2019: tanh, no-bias LeNet-5 with zero-mean ("var") layers;
  * Fig. 1 of Neklyudov et al. 2019: the toy four-class problem with a two-neuron variance
  bottleneck;
  * Fig. 3 of Neklyudov et al. 2019 (phase transition), Figs. 3-5 of Neklyudov et al. 2018 (kappa
  histograms, count above
    log10 kappa0 = 1.5 per epoch, sparse ensembles), Fig. 5 of Neklyudov et al. 2019 (pruning by
    sigma).
Every network checkpoints at the end of each epoch and resumes from there when the same command
is run again; a finished network is stored in OUT/runs/ (``vbnn.stores.unit_store``: settings,
result and weights) and reused (``runs``). ``--networks`` trains only the named networks (so that
long runs can go in parallel processes); ``--protocol`` follows the papers' text or the authors'
public code (``budget.PROTOCOLS``, every difference in ``--help``). With ``--executor ray``
the networks train as Ray tasks first (``runs.run_missing``); the tables then read them back.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from vbnn.classification.training import ClassifierConfig, train_classifier
from vbnn.core.randomness import ModelGenerators
from vbnn.data.mnist import load_images
from vbnn.networks.lenet import LeNet5
from vbnn.priors.log_uniform import LogUniformPrior
from vbnn.stores.atomic import write_atomic
from vbnn.sweeps.contracts import ExecutorKind
from vbnn.sweeps.executors import add_executor_arguments, settings_from
from vbnn_lab import PAPERS_ESTIMATOR
from vbnn_lab.variance_networks.batchnorm import diagnose
from vbnn_lab.variance_networks.budget import (
    BUDGETS,
    PROTOCOL_TABLE,
    PROTOCOLS,
    Budget,
    TrainingProtocol,
    resolve_budget,
)
from vbnn_lab.variance_networks.runs import (
    NetworkRun,
    network_specs,
    run_missing,
    select_networks,
    table_networks,
    train_selected,
)
from vbnn_lab.variance_networks.tables import make_tables, markdown, phase_transition_only

__all__ = ["BUDGETS", "DESCRIPTION", "Budget", "add_arguments", "run", "time_epochs"]

DESCRIPTION = (
    "Variance networks (Neklyudov et al. 2018, 2019): LeNet-5 tables, toy bottleneck, kappa"
)
BATCHNORM_NETWORKS = ("table1-layer", "table2-variance")
DEFAULT_OUT = "results/variance-networks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = PROTOCOL_TABLE
    parser.add_argument("--quick", action="store_true", help="~5 min on a data subset")
    parser.add_argument("--size", choices=list(BUDGETS), default=None, help="overrides --quick")
    parser.add_argument(
        "--epochs", type=int, default=None, help="override the budget's epochs (full: 200)"
    )
    parser.add_argument(
        "--protocol",
        choices=[p.value for p in TrainingProtocol],
        default=None,
        help="text: the papers' text (default); authors: the authors' public code; "
        "authors-without-batchnorm: an ablation of it (below)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="K",
        help="tracker and kappa after every K-th epoch and the last (default: full 5, else 1)",
    )
    parser.add_argument(
        "--networks",
        default=None,
        metavar="NAME,...",
        help="train only these networks (resumable; no tables), e.g. "
        f"table2-variance,table1-layer; names: {', '.join(network_specs())}",
    )
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", choices=["mnist", "fashion-mnist"], default="mnist")
    parser.add_argument(
        "--time-epoch", action="store_true", help="only time LeNet-5 steps and print epoch cost"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the networks train, e.g. cuda or cuda:1 (a run there is stored apart from "
        "the CPU's: its training noise comes from the device's generators)",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--phase-only",
        action="store_true",
        help="only track the Table 1 layer-wise run per epoch (phase transition, kappa counts)",
    )
    parser.add_argument(
        "--batchnorm-diagnostic",
        action="store_true",
        help="no training: mean-propagation accuracy of the stored --networks (default "
        f"{','.join(BATCHNORM_NETWORKS)}) with BatchNorm's running statistics, the mean "
        "activations' own statistics and no BatchNorm (writes OUT/batchnorm_diagnostic.csv)",
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
    device = checked_device(args.device)
    budget = resolve_budget(args)
    train_x, train_y = load_images(args.dataset, "train", args.data_dir)
    test_x, test_y = load_images(args.dataset, "test", args.data_dir)
    if args.time_epoch:
        time_epochs(train_x, train_y, TrainingProtocol(budget.protocol), device=device)
        return
    if args.batchnorm_diagnostic:
        names = select_networks(args.networks or ",".join(BATCHNORM_NETWORKS))
        runs = [NetworkRun(name, budget, args.seed, device) for name in names]
        frame = diagnose(runs, test_x[: budget.test_size], test_y[: budget.test_size],
                         Path(args.out))  # fmt: skip
        write_atomic(Path(args.out) / "batchnorm_diagnostic.csv", frame.to_csv(index=False))
        print(f"mean propagation (%) of the stored networks, {budget.test_size} test images:")
        print(markdown(frame.set_index("network")))
        return
    out = Path(args.out)
    started = time.perf_counter()
    data = (train_x[: budget.train_size], train_y[: budget.train_size],
            test_x[: budget.test_size], test_y[: budget.test_size])  # fmt: skip
    executor = settings_from(args)
    names = select_networks(args.networks) if args.networks is not None else None
    if executor.kind is not ExecutorKind.LOCAL:  # train the networks as units; the rest reads
        wanted = names or (["phase-only-layer"] if args.phase_only else table_networks())
        run_missing([NetworkRun(name, budget, args.seed, device) for name in wanted], data, out,
                    executor)  # fmt: skip
    if names is not None:
        runs = [NetworkRun(name, budget, args.seed, device) for name in names]
        frame = train_selected(runs, data, out, not args.no_progress)
        print(f"budget {budget.name}, protocol {budget.protocol}, {budget.epochs} epochs:")
        print(markdown(frame.set_index("network")))
        return
    if args.phase_only:
        frame = phase_transition_only(out, budget, data, args.seed, not args.no_progress, device)
        rate = budget.log_alpha_learning_rate or 1e-3
        print(f"budget {budget.name}, {budget.epochs} epochs, log alpha learning rate {rate}:")
        print(frame.round(2).to_string(index=False))
        return
    make_tables(out, budget, data, args.seed, not args.no_progress, device)
    seconds = time.perf_counter() - started
    note = (
        f"budget {budget.name}: {budget.train_size} training and {budget.test_size} test images"
        f" of {args.dataset}, protocol {budget.protocol}, {budget.epochs} epochs, K ="
        f" {budget.samples}, log alpha learning rate {budget.log_alpha_learning_rate or 1e-3};"
        f" device {device}; wall {seconds:.0f} s"
    )
    protocol = {"name": budget.protocol, **asdict(PROTOCOLS[TrainingProtocol(budget.protocol)])}
    record = {"budget": asdict(budget), "protocol": protocol, "seconds": seconds,
              "seed": args.seed, "dataset": args.dataset, "device": device}  # fmt: skip
    write_atomic(out / "run.json", json.dumps(record, indent=1))
    summary = (out / "summary.md").read_text()
    write_atomic(out / "summary.md", f"{note}\n\n{summary}")
    print(note)
    print(summary)
    if budget.name != "full":
        print(f"NOTE: {budget.name} run on a data subset; numbers are not the paper's protocol.")


def checked_device(name: str) -> str:
    """``name`` as a torch device string; ValueError naming --device when it is unknown or not
    present on this machine."""
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ValueError(f"--device {name!r}: {error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name!r}: this machine's torch sees no CUDA device")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {name!r}: only cpu and cuda are supported")
    return str(device)


def time_epochs(train_x, train_y, protocol: TrainingProtocol, steps: int = 30,
                device: str = "cpu") -> None:  # fmt: skip
    """Time ``steps`` minibatch steps of the two long-run LeNet-5 networks (batch, BatchNorm and
    log alpha of ``protocol``) on ``device`` after 5 warm-up steps; print seconds per epoch of
    the full set."""
    settings = PROTOCOLS[protocol]
    train_x, train_y = train_x.to(device), train_y.to(device)
    specs = network_specs()
    for label, name in (("variance (4 x vd-layer)", "table2-variance"),
                        ("dense1 only (Table 1)", "table1-layer")):  # fmt: skip
        config = replace(specs[name].config, log_alpha_init=settings.log_alpha_init,
                         batch_norm=settings.batch_norm)  # fmt: skip
        model = LeNet5(config, ModelGenerators([0]), training_mode=PAPERS_ESTIMATOR).to(device)
        timings = []
        for count in (5, steps):
            size = count * settings.batch_size
            run_config = ClassifierConfig(epochs=1, batch_size=settings.batch_size)
            seconds = train_classifier(model, LogUniformPrior(), train_x[:size], train_y[:size],
                                       run_config, progress=False)  # fmt: skip
            timings.append(seconds[0])
        per_step = timings[-1] / steps
        per_epoch = per_step * -(-len(train_y) // settings.batch_size)
        print(f"{label}, protocol {protocol.value}: {per_step:.4f} s/step (batch "
              f"{settings.batch_size}), {per_epoch:.1f} s per epoch of {len(train_y)} images "
              f"(device {device}, threads={torch.get_num_threads()})")  # fmt: skip
