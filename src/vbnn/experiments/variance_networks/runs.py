"""The LeNet-5 training runs of the variance-networks reproduction, each one unit of work.

:func:`table_runs` lists every run the tables need (:func:`phase_run` the ``--phase-only`` one);
:func:`compute_run` trains one and returns its weights and result, storing nothing (what a Ray
worker does); :func:`train_run` reloads a stored run or computes and stores it (OUT/runs/,
``vbnn.stores.unit_store``); :func:`run_missing` sends the runs not yet stored to an executor
and stores each as it comes back, so the tables then only read.

Every run: Adam, learning rate 1e-3, batch 100, one noise sample per step, log-uniform prior with
the Molchanov et al. KL approximation, KL weight 1 (the ELBO of the training subset).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vbnn.classification.training import (
    ClassifierConfig,
    PhaseTransitionTracker,
    accuracies,
    evaluate_elbo,
    train_classifier,
)
from vbnn.core.contracts import InferenceMode
from vbnn.core.randomness import ModelGenerators
from vbnn.experiments.variance_networks.budget import TABLE1, TABLE1_ACTIVATION, TANH, Budget
from vbnn.experiments.variance_networks.parts import kappa_callback
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors.dropout import LogUniformPrior
from vbnn.stores import unit_store
from vbnn.sweeps.executors import ExecutorSettings, Unit, run_sweep

DENSE1 = 2  # index of the first dense layer in LeNet5.layers
TABLE1_MODES = (InferenceMode.DETERMINISTIC, InferenceMode.ENSEMBLE)
KAPPA = "kappa_epoch_"  # stored arrays beside the weights: dense1's kappa after each epoch


@dataclass(frozen=True)
class RunSpec:
    """One training run: its name, network, whether it is tracked each epoch (with dense1's
    kappa) and the inference modes its test accuracy is measured in."""

    name: str
    config: LeNetConfig
    track: bool = False
    kappa: bool = False
    modes: tuple[InferenceMode, ...] = tuple(InferenceMode)


def table_runs() -> list[RunSpec]:
    """The runs of Table 1 (dense1 in each parameterization), Table 2 and appendix C of 003."""
    runs = []
    for label, family in TABLE1.items():
        families = ("deterministic", "deterministic", family, "deterministic")
        config = LeNetConfig(families=families, activation=TABLE1_ACTIVATION.get(label, "softplus"))
        layer = label == "layer"
        runs.append(RunSpec(f"table1-{label}", config, layer, layer, TABLE1_MODES))
    for label, families in (("dropout", ("deterministic", "deterministic", "dropout", "dropout")),
                            ("variance", ("vd-layer",) * 4)):  # fmt: skip
        runs.append(RunSpec(f"table2-{label}", LeNetConfig(families, "relu"), track=True))
    modes = (InferenceMode.DETERMINISTIC, InferenceMode.SAMPLE, InferenceMode.ENSEMBLE)
    for label, families in TANH.items():
        config = LeNetConfig(families=families, activation="tanh", bias=False)
        runs.append(RunSpec(f"tanh-{label}", config, modes=modes))
    return runs


def phase_run() -> RunSpec:
    """The Table 1 layer-wise run, tracked every epoch (``--phase-only``)."""
    families = ("deterministic", "deterministic", "vd-layer", "deterministic")
    return RunSpec("phase-only-layer", LeNetConfig(families=families, activation="softplus"),
                   track=True, kappa=True, modes=TABLE1_MODES)  # fmt: skip


def _key(spec: RunSpec, budget: Budget, seed: int) -> dict[str, Any]:
    return {"name": spec.name, "budget": asdict(budget), "config": repr(spec.config), "seed": seed}


def compute_run(
    spec: RunSpec, budget: Budget, data, seed: int, progress: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Train one run; returns (weights and per-epoch kappa arrays, result record)."""
    train_x, train_y, test_x, test_y = data
    model = LeNet5(spec.config, ModelGenerators.for_keys(seed, [0], "init"))
    tracker, kappa = None, {}
    if spec.track:
        extra = None
        if spec.kappa:
            extra = kappa_callback(DENSE1, train_x[: budget.kappa_size],
                                   train_y[: budget.kappa_size], kappa)  # fmt: skip
        tracker = PhaseTransitionTracker(test_x[: budget.track_size], test_y[: budget.track_size],
                                         min(budget.samples, 10), seed, extra)  # fmt: skip
    prior = LogUniformPrior()
    settings = ClassifierConfig(
        epochs=budget.epochs, seed=seed, log_alpha_learning_rate=budget.log_alpha_learning_rate
    )
    seconds = train_classifier(model, prior, train_x, train_y, settings, tracker, progress,
                               spec.name)  # fmt: skip
    model.eval()
    record = {
        "accuracy": accuracies(model, test_x, test_y, budget.samples, seed, spec.modes),
        "elbo": evaluate_elbo(model, prior, train_x, train_y, seed),
        "epoch_seconds": seconds,
        "mean_log_alpha": model.mean_log_alpha(),
        "tracking": tracker.frame().to_dict("list") if tracker else None,
    }
    arrays = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    arrays.update({f"{KAPPA}{epoch}": np.asarray(v) for epoch, v in kappa.items()})
    return arrays, record


def train_run(spec: RunSpec, budget: Budget, data, seed: int, out: Path, progress: bool,
              kappa: dict | None = None):  # fmt: skip
    """Reload the stored run (or train and store it); returns (model, result record) and fills
    ``kappa`` with dense1's kappa per epoch when the run tracked it."""
    key = _key(spec, budget, seed)
    stored = unit_store.load(out / "runs", key)
    if stored is None:
        arrays, record = compute_run(spec, budget, data, seed, progress)
        unit_store.save(out / "runs", key, arrays, record)
    else:
        arrays, record = stored
    model = LeNet5(spec.config, ModelGenerators.for_keys(seed, [0], "init"))
    state = {k: torch.from_numpy(v) for k, v in arrays.items() if not k.startswith(KAPPA)}
    model.load_state_dict(state)
    if kappa is not None:
        kappa.update({int(k[len(KAPPA) :]): v for k, v in arrays.items() if k.startswith(KAPPA)})
    return model, record


def run_missing(
    specs: list[RunSpec], budget: Budget, data, seed: int, out: Path, executor: ExecutorSettings
) -> None:
    """Train every run of ``specs`` not yet stored as units on ``executor``; store each."""
    units = [
        Unit(spec.name, compute_run, (spec, budget, data, seed), executor.cpus_per_unit)
        for spec in specs
        if unit_store.load(out / "runs", _key(spec, budget, seed)) is None
    ]

    def store(unit: Unit, outcome: tuple[dict, dict]) -> None:
        spec = unit.arguments[0]
        unit_store.save(out / "runs", _key(spec, budget, seed), *outcome)

    run_sweep(executor, units, store, "LeNet-5 runs")
