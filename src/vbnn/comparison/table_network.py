"""Methods that train a network, compared on a table: an MLP per fold through the methods' table.

The UCI engine and the classifier stacks train the families (and ``es``, ``map``, ``sgld``) as
batched stacks of folds; every other method of ``vbnn.methods`` (``ivon``, ``ensemble``,
``laplace``, ``swag``, ``mc-dropout``, ``NAME+ts`` on a classification, ...) trains
the same MLP as the stacks, one fold a unit, through ``comparison.entries`` as on a user's
network: hidden layers of ``CompareConfig.hidden`` with tanh, inputs standardised by each fold's
training rows, K = ``test_samples`` predictive samples, M = 5 members of an ensemble. A
regression follows the UCI engine's protocol: ``iterations`` full-batch Adam steps (5000) at the
engine's rate 0.005, and a method that stops early keeps its best step on 10 % of the training
rows held out (as ``es``; "point" on a regression table is the engine's VI of the point family).
A classification follows the classifier stacks': ``epochs`` minibatch epochs of ``batch_size``
rows at ``learning_rate``, early stopping as on a network. ``mc-dropout``'s MLP holds a dropout
layer after each hidden layer at rate 0.05 (Gal & Ghahramani 2016's UCI setting); the others
hold none. These entries are not tuned (``tuning_seconds`` 0).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from vbnn.comparison.config import CompareConfig
from vbnn.comparison.entries import EntryRun, NetworkSource
from vbnn.comparison.folds import Split, Task
from vbnn.comparison.network import entry_unit
from vbnn.core.defaults import PATIENCE, UCI_ITERATIONS, VALIDATION_FRACTION
from vbnn.data.splits import standardise
from vbnn.methods.base import PredictiveKind
from vbnn.methods.registry import base_method
from vbnn.regression.runs import DEFAULT_LEARNING_RATE, ESConfig
from vbnn.sweeps.contracts import Unit
from vbnn.sweeps.driver import Runs, UnitBuilder

DROPOUT_RATE = 0.05
ENSEMBLE_SIZE = 5


def table_mlp(features: int, hidden: tuple[int, ...], outputs: int, dropout: float) -> nn.Module:
    """features -> hidden (tanh, then dropout at ``dropout`` if > 0) -> outputs."""
    layers: list[nn.Module] = []
    width = features
    for size in hidden:
        layers += [nn.Linear(width, size), nn.Tanh()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = size
    layers.append(nn.Linear(width, outputs))
    return nn.Sequential(*layers)


def network_run(name: str, config: CompareConfig, task: Task) -> EntryRun:
    """The settings of entry ``name`` on a table (module docstring)."""
    members = ENSEMBLE_SIZE if base_method(name).ensemble else 1
    if task is Task.REGRESSION:  # the UCI engine's protocol: full-batch steps, ES's best step
        steps = config.iterations or UCI_ITERATIONS
        return EntryRun(
            name,
            epochs=steps,
            batch_size=None,
            learning_rate=DEFAULT_LEARNING_RATE,
            samples=config.test_samples,
            ensemble_size=members,
            seed=config.seed,
            patience=steps,
            validation_fraction=ESConfig().validation_fraction,
        )
    return EntryRun(
        name,
        epochs=config.epochs,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        samples=config.test_samples,
        ensemble_size=members,
        seed=config.seed,
        patience=PATIENCE,
        validation_fraction=VALIDATION_FRACTION,
    )


def network_units(
    x: np.ndarray,
    target: np.ndarray,
    splits: tuple[Split, ...],
    task: Task,
    config: CompareConfig,
    cpus: int | None,
) -> UnitBuilder:
    """The unit builder of the network entries: one unit per (entry, fold), an MLP trained on
    the fold's standardised training rows and scored on its test rows."""
    regression = task is Task.REGRESSION
    outputs = 1 if regression else int(target.max()) + 1
    y = torch.as_tensor(target, dtype=torch.float32 if regression else torch.long)

    def build(entry: Runs, missing: list[int]) -> list[Unit]:
        dropout = (
            DROPOUT_RATE
            if base_method(entry.label).predictive is PredictiveKind.MC_DROPOUT
            else 0.0
        )
        source = NetworkSource(partial(table_mlp, x.shape[1], config.hidden, outputs, dropout))
        units = []
        for k in missing:
            train, test = splits[k]
            inputs = [
                torch.as_tensor(part, dtype=torch.float32)
                for part in standardise(x[train], x[test])[:2]
            ]
            arguments: tuple[Any, ...] = (
                source,
                entry.config,
                k,
                (inputs[0], y[train]),
                (inputs[1], y[test]),
                None,
                task,
                config.level,
            )
            units.append(Unit(f"{entry.label} fold {k}", entry_unit, arguments, cpus))
        return units

    return build
