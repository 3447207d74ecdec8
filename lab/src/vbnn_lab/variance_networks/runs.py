"""The LeNet-5 networks of the variance-networks reproduction, each one resumable training run.

Every network is named (``network_specs``: ``table1-<row>``, ``table2-dropout``,
``table2-variance``, ``tanh-<row>``, ``phase-only-layer``) and trained by ``train_run``: Adam,
log-uniform prior with the Molchanov et al. KL approximation, KL weight 1 (the ELBO of the
training subset), one LRT sample per step, and the batch size, step-size schedule, initial log
alpha and BatchNorm of the budget's protocol (``budget.PROTOCOLS``).

Resuming. A run checkpoints at the end of every epoch to ``OUT/runs/<key>.checkpoint.pt``
(``classification.checkpoint``); the same command after a kill continues from there, losing at
most the epoch under way, with the numbers of an uninterrupted run. A finished network is stored
in ``OUT/runs/`` (``stores.unit_store``: settings, result, weights, the kappa of the histogram
epochs), its checkpoint deleted, and skipped by every later command with the same settings.
While it trains, its tracking so far is in ``OUT/progress/<name>_tracking.csv``.

Units of work. :func:`compute_run` trains one network and returns its arrays and result, writing
only its checkpoint and tracking file; :func:`store_run` stores them (the driver's part);
:func:`train_run` does both here, and :func:`run_missing` sends the networks not yet stored to an
executor (``--executor ray``) and stores each as it comes back, so the tables then only read.
A Ray worker checkpoints to the same ``OUT/runs/`` path: a retried run resumes from its last
epoch when that folder is shared by the nodes (docs/sweeps.md states the limit otherwise).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from vbnn.classification.inference import PREDICTIONS
from vbnn.classification.training import (
    ClassifierConfig,
    PhaseTransitionTracker,
    accuracies,
    evaluate_elbo,
    plot_phase_transition,
    train_classifier,
)
from vbnn.core.randomness import ModelGenerators
from vbnn.networks.lenet import LAYER_NAMES, LeNet5, LeNetConfig
from vbnn.networks.summary import mean_log_alpha
from vbnn.priors.log_uniform import LogUniformPrior
from vbnn.stores import unit_store
from vbnn.stores.atomic import write_atomic
from vbnn.sweeps.contracts import ExecutorSettings, Unit
from vbnn.sweeps.executors import run_sweep
from vbnn_lab import PAPERS_ESTIMATOR
from vbnn_lab.variance_networks.budget import (
    PROTOCOLS,
    TABLE1,
    TABLE1_ACTIVATION,
    TANH,
    Budget,
    TrainingProtocol,
)
from vbnn_lab.variance_networks.parts import (
    KappaCounter,
    histogram_epochs,
    plot_kappa_histograms,
)

DENSE1 = 2  # index of the first dense layer in LeNet5.layers
TABLE1_PREDICTIONS = ("deterministic", "ensemble")
TANH_PREDICTIONS = ("deterministic", "sample", "ensemble")
KAPPA_PREFIX = "kappa_epoch_"  # arrays of the stored unit holding the histogram epochs' kappa


@dataclass(frozen=True)
class NetworkSpec:
    """One network of the reproduction: its LeNet-5, whether the tracker follows it every
    ``eval_every`` epochs (with kappa of dense1 when ``kappa``), and the predictions of its
    final test accuracy (each costs passes over the test set)."""

    config: LeNetConfig
    track: bool = False
    kappa: bool = False
    predictions: tuple[str, ...] = tuple(PREDICTIONS)


def network_specs() -> dict[str, NetworkSpec]:
    """Every network of the reproduction by name (Table 1 rows, Table 2, appendix C, phase)."""
    specs = {}
    for label, family in TABLE1.items():
        families = ("point", "point", family, "point")
        activation = TABLE1_ACTIVATION.get(label, "softplus")
        config = LeNetConfig(families=families, activation=activation)
        is_layer = label == "layer"
        specs[f"table1-{label}"] = NetworkSpec(config, is_layer, is_layer, TABLE1_PREDICTIONS)
    dropout = ("point", "point", "dropout", "dropout")
    specs["table2-dropout"] = NetworkSpec(LeNetConfig(families=dropout), track=True)
    specs["table2-variance"] = NetworkSpec(LeNetConfig(families=("vd-layer",) * 4), track=True)
    for label, families in TANH.items():
        config = LeNetConfig(families=families, activation="tanh", bias=False)
        specs[f"tanh-{label}"] = NetworkSpec(config, predictions=TANH_PREDICTIONS)
    layer = ("point", "point", "vd-layer", "point")
    config = LeNetConfig(families=layer, activation="softplus")
    specs["phase-only-layer"] = NetworkSpec(config, True, True, TABLE1_PREDICTIONS)
    return specs


def select_networks(text: str) -> list[str]:
    """Network names from a comma-separated list; ValueError naming the unknown ones."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = network_specs()
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"--networks: unknown {unknown or text!r}; choose from {list(known)}")
    return names


def table_networks() -> list[str]:
    """The networks the tables need (every one but the ``--phase-only`` run)."""
    return [name for name in network_specs() if name != "phase-only-layer"]


def protocol_config(spec: NetworkSpec, budget: Budget) -> LeNetConfig:
    """The spec's LeNet-5 with the initial log alpha and BatchNorm of the budget's protocol."""
    protocol = PROTOCOLS[TrainingProtocol(budget.protocol)]
    return replace(spec.config, log_alpha_init=protocol.log_alpha_init,
                   batch_norm=protocol.batch_norm)  # fmt: skip


@dataclass(frozen=True)
class NetworkRun:
    """One training run: network ``name`` (``network_specs``) under ``budget`` and ``seed``,
    trained on ``device`` (initial weights always drawn on the CPU)."""

    name: str
    budget: Budget
    seed: int
    device: str = "cpu"


def run_key(run: NetworkRun) -> dict[str, Any]:
    """The settings a stored network (and its checkpoint) is keyed by: the budget and the
    network's ``LeNetConfig`` as dataclasses, so that their fields at the defaults stay out of
    the key (``unit_store.settings_key``). A run on an accelerator draws its training noise from
    that device's generators (other numbers than on the CPU), so the device type is part of the
    key."""
    config = protocol_config(network_specs()[run.name], run.budget)
    key = {"name": run.name, "budget": run.budget, "config": config, "seed": run.seed}
    return {**key, "device": torch.device(run.device).type}


def checkpoint_path(out: Path, run: NetworkRun) -> Path:
    return out / "runs" / f"{unit_store.settings_key(run_key(run))}.checkpoint.pt"


def compute_run(run: NetworkRun, data, out: Path, progress: bool = False
                ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
    """Train (or resume from its checkpoint) the network of ``run``; returns (weights and the
    kappa of the histogram epochs as CPU arrays, result record). Stores no result
    (:func:`store_run` does)."""
    name, budget, seed = run.name, run.budget, run.seed
    spec = network_specs()[name]
    protocol = PROTOCOLS[TrainingProtocol(budget.protocol)]
    train_x, train_y, test_x, test_y = (tensor.to(run.device) for tensor in data)
    model = LeNet5(protocol_config(spec, budget), ModelGenerators.for_keys(seed, [0], "init"),
                   training_mode=PAPERS_ESTIMATOR)  # fmt: skip
    model.to(run.device)
    tracker, counter = None, None
    if spec.track:
        if spec.kappa:
            keep = histogram_epochs(budget.epochs, budget.eval_every)
            counter = KappaCounter(DENSE1, train_x[: budget.kappa_size],
                                   train_y[: budget.kappa_size], keep)  # fmt: skip
        progress_csv = out / "progress" / f"{name}_tracking.csv"
        tracker = PhaseTransitionTracker(
            test_x[: budget.track_size], test_y[: budget.track_size], min(budget.samples, 10),
            seed, counter, lambda frame: write_atomic(progress_csv, frame.to_csv(index=False)),
            layer_names=LAYER_NAMES,
        )  # fmt: skip
    prior = LogUniformPrior()
    settings = ClassifierConfig(
        epochs=budget.epochs, batch_size=protocol.batch_size, seed=seed,
        log_alpha_learning_rate=budget.log_alpha_learning_rate, schedule=protocol.schedule,
        eval_every=budget.eval_every,
    )  # fmt: skip
    seconds = train_classifier(model, prior, train_x, train_y, settings, callback=tracker,
                               progress=progress, description=name,
                               checkpoint=checkpoint_path(out, run))  # fmt: skip
    model.eval()
    record = {
        "accuracy": accuracies(model, test_x, test_y, budget.samples, seed, spec.predictions),
        "elbo": evaluate_elbo(model, prior, train_x, train_y, seed),
        "epoch_seconds": seconds,
        "mean_log_alpha": mean_log_alpha(model, LAYER_NAMES),
        "protocol": {"name": budget.protocol, **asdict(protocol)},
        "tracking": tracker.frame().to_dict("list") if tracker else None,
    }
    kappa = counter.store if counter is not None else {}
    arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    arrays.update({f"{KAPPA_PREFIX}{epoch}": np.asarray(v) for epoch, v in kappa.items()})
    return arrays, record


def store_run(run: NetworkRun, out: Path,
              outcome: tuple[dict[str, np.ndarray], dict[str, Any]]) -> None:  # fmt: skip
    """Store a computed network (``OUT/runs/``), then delete its checkpoint."""
    unit_store.save(out / "runs", run_key(run), *outcome)
    checkpoint_path(out, run).unlink(missing_ok=True)


def train_run(run: NetworkRun, data, out: Path, progress: bool):
    """Train (resume, or reload the stored result of) the network of ``run``; returns (model on
    the CPU, result dict, kappa of the histogram epochs {epoch: array}, empty unless the spec
    tracks kappa)."""
    stored = unit_store.load(out / "runs", run_key(run))
    if stored is None:
        stored = compute_run(run, data, out, progress)
        store_run(run, out, stored)
    else:  # a checkpoint is left when a kill came between storing and deleting
        checkpoint_path(out, run).unlink(missing_ok=True)
    arrays, record = stored
    kappa = {
        int(k[len(KAPPA_PREFIX) :]): v for k, v in arrays.items() if k.startswith(KAPPA_PREFIX)
    }
    return network_from_arrays(run, arrays), record, kappa


def network_from_arrays(run: NetworkRun, arrays: dict[str, np.ndarray]) -> LeNet5:
    """The network of ``run`` (a stack of one, as trained, in eval mode on the CPU) with the
    weights of a stored unit's arrays."""
    state = {k: torch.from_numpy(v) for k, v in arrays.items() if not k.startswith(KAPPA_PREFIX)}
    model = LeNet5(protocol_config(network_specs()[run.name], run.budget),
                   ModelGenerators.for_keys(run.seed, [0], "init"),
                   training_mode=PAPERS_ESTIMATOR)  # fmt: skip
    model.load_state_dict(state)
    return model.eval()


def load_stored(run: NetworkRun, out: Path) -> LeNet5:
    """The stored network of ``run`` in ``out/runs`` without training it.

    Raises:
        FileNotFoundError: it has not been trained to the end (names the folder and the run).
    """
    stored = unit_store.load(out / "runs", run_key(run))
    if stored is None:
        raise FileNotFoundError(
            f"{out / 'runs'}: no finished {run.name!r} run (budget {run.budget.name}, protocol"
            f" {run.budget.protocol}, seed {run.seed}, device {run.device}); train it with"
            f" --networks {run.name}"
        )
    return network_from_arrays(run, stored[0])


def run_missing(runs: list[NetworkRun], data, out: Path, executor: ExecutorSettings) -> None:
    """Train the ``runs`` not yet stored as units on ``executor``; store each as it comes back
    (the workers write only their checkpoints and tracking files under ``out``)."""
    out, cpus = out.resolve(), executor.cpus_per_unit
    units = [
        Unit(run.name, compute_run, (run, data, out, False), cpus)
        for run in runs
        if unit_store.load_info(out / "runs", run_key(run)) is None
    ]

    def store(unit: Unit, outcome: tuple[dict, dict]) -> None:
        store_run(unit.arguments[0], out, outcome)

    run_sweep(executor, units, store, "LeNet-5 runs")


def train_selected(runs: list[NetworkRun], data, out: Path, progress: bool) -> pd.DataFrame:
    """Train (or resume, or skip when stored) the ``runs`` one after the other. Writes, per
    network, ``OUT/<name>_summary.csv`` (final accuracy in each mode, mean log alpha, epoch
    seconds) and, when tracked, ``<name>_tracking.csv``, ``<name>_phase_transition.png`` and
    ``<name>_kappa_histograms.png``; returns the summary rows."""
    rows = []
    for run in runs:
        name = run.name
        _, record, kappa = train_run(run, data, out, progress)
        if record["tracking"] is not None:
            tracking = pd.DataFrame(record["tracking"])
            write_atomic(out / f"{name}_tracking.csv", tracking.to_csv(index=False))
            plot_phase_transition(tracking, out / f"{name}_phase_transition.png", name)
        if kappa:
            plot_kappa_histograms(kappa, out / f"{name}_kappa_histograms.png")
        seconds = record["epoch_seconds"]
        alphas = {f"log alpha {k}": v for k, v in record["mean_log_alpha"].items()}
        row = {"network": name, "protocol": run.budget.protocol, "epochs": len(seconds),
               "mean epoch s": float(np.mean(seconds)), **record["accuracy"], **alphas}  # fmt: skip
        write_atomic(out / f"{name}_summary.csv", pd.DataFrame([row]).to_csv(index=False))
        rows.append(row)
    return pd.DataFrame(rows)
