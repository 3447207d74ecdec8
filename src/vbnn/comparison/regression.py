"""Regression folds on the UCI engine: tune each fold, train each family's folds as one stack.

For each family the driver (``compare.run``) first completes one Optuna study per fold (tuning
on validation rows carved from that fold's training rows, ``regression.tuning.tune``; the studies
live in the results database's file), reads back each fold's best values, then trains the folds
the database lacks as the engine's chunks: folds of equal size form one batched stack
(``engine.run_splits`` with each fold's own values; ES tuned per fold trains one fold at a time,
as one Adam cannot vary its learning rate per model). Every finished chunk is stored in one
transaction with its interval coverage (:func:`interval_coverages`), so a killed comparison
resumes where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from vbnn.comparison.config import CompareConfig
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.metrics import interval_coverage
from vbnn.networks.predictive import sample
from vbnn.regression.engine import TrainedStack
from vbnn.regression.methods import method_config, method_fields
from vbnn.regression.presets import preset
from vbnn.regression.runs import PredictiveKind, TrainConfig
from vbnn.regression.tuning_driver import stored_trials

COVERAGE = "coverage"


def train_config(name: str, config: CompareConfig, preset_name: str) -> TrainConfig:
    """The engine's config of family ``name``: the preset values of ``preset_name`` (a UCI set's
    tuned values, else the stated defaults) under ``config``'s shared settings."""
    values, _ = preset(preset_name, name)
    shared = {
        "hidden": config.hidden,
        "iterations": config.iterations,
        "seed": config.seed,
        "test_samples": config.test_samples,
    }
    values |= {k: v for k, v in shared.items() if k in method_fields(name) and v is not None}
    return method_config(name, **values)


def provenance(config: CompareConfig, values: Mapping[int, Mapping[str, float]]) -> dict[str, Any]:
    """What a comparison's runs are stored with (part of their key): how the values were chosen
    and each fold's values."""
    if not config.tune:
        return {"compare": "preset"}
    return {
        "compare": "tuned per fold",
        "trials": config.trials,
        "validation_fraction": config.validation_fraction,
        "values": {str(k): dict(v) for k, v in values.items()},
    }


def search_seconds(storage: Any, name: str) -> float:
    """Wall seconds of study ``name``: the length of the union of its trials' [start, complete]
    intervals (the candidates of one round train together, so their intervals overlap)."""
    spans = sorted(
        (t.datetime_start, t.datetime_complete)
        for t in stored_trials(storage, name)
        if t.datetime_start is not None and t.datetime_complete is not None
    )
    total, reached = 0.0, None
    for start, end in spans:
        begin = start if reached is None or start > reached else reached
        if end > begin:
            total += (end - begin).total_seconds()
            reached = end
    return total


@torch.no_grad()
def interval_coverages(stack: TrainedStack, level: float = 0.95) -> dict[int, dict[str, float]]:
    """Share of each fold's test targets inside the central ``level`` predictive interval.

    The predictive of a stochastic family is the mixture (1/K) sum_k N(f_k(x), sigma^2) over
    K = ``config.predictive.samples`` draws (the draws of the test log-likelihood: the same
    ``eval`` streams); ES and MAP predict N(f(x), sigma^2) at their point weights. Coverage does not
    depend on the target's scale, so it is computed in standardised units. SGLD keeps its
    samples inside the engine, so its coverage is NaN.

    Returns:
        fold id -> {"coverage": value in [0, 1]}.
    """
    config, data = stack.config, stack.data
    keys = list(data.split_ids)
    predictive = config.predictive
    if predictive.kind is PredictiveKind.CHAIN:
        return {k: {COVERAGE: math.nan} for k in keys}
    noise = stack.likelihood.std()
    if predictive.kind is PredictiveKind.POINT:  # ES, MAP
        means = stack.model(data.x_test, ForwardMode.MEAN).squeeze(-1)  # (M, N)
        return {
            k: {COVERAGE: float(interval_coverage(means[m], noise[m], data.y_test[m], level))}
            for m, k in enumerate(keys)
        }
    streams = ModelGenerators.for_keys(config.seed, keys, "eval")
    draws = sample(stack.model, data.x_test, predictive.samples, ForwardMode.LOCAL, noise=streams)
    draws = draws.squeeze(-1)  # (K, M, N)
    return {
        k: {COVERAGE: float(interval_coverage(draws[:, m], noise[m], data.y_test[m], level))}
        for m, k in enumerate(keys)
    }
