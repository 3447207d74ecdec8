"""Train one stack of splits and keep the trained model (``engine.run_stack`` keeps only metrics).

Saving a model, the over-pruning diagnostics and the training trajectories need the trained
stack itself; :func:`train_stack` follows ``engine.run_stack`` step for step (same random
streams, same validation carve for ES), so its metrics equal those of ``run_stack``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from vbnn.data.splits import StackedSplits
from vbnn.engine import _carve_validation, build_stack
from vbnn.evaluation import evaluate
from vbnn.models import MLP, GaussianLikelihood
from vbnn.random import ModelGenerators
from vbnn.training import StepCallback, fit
from vbnn.types import Method, SplitResult, TrainConfig


@dataclass
class TrainedStack:
    """A trained stack with the data it was trained on and its per-split test metrics."""

    model: MLP
    likelihood: GaussianLikelihood
    config: TrainConfig
    data: StackedSplits
    results: list[SplitResult]


def train_stack(
    config: TrainConfig,
    data: StackedSplits,
    progress: bool = False,
    callback: StepCallback | None = None,
) -> TrainedStack:
    """Build, fit and evaluate one stack exactly as ``engine.run_stack`` does, keeping the model.

    ``callback(iteration, terms)`` is passed to ``training.fit`` (e.g. a trajectory logger).
    """
    start = time.perf_counter()
    keys = list(data.split_ids)
    model, likelihood = build_stack(config, data.x_train.shape[-1], keys)
    x, y, validation = data.x_train, data.y_train, None
    if config.method is Method.ES:
        x, y, validation = _carve_validation(config, data)
    info = fit(
        config,
        model,
        likelihood,
        x,
        y,
        ModelGenerators.for_keys(config.seed, keys, "train"),
        validation=validation,
        labels=[f"split {k}" for k in keys],
        progress=progress,
        description=f"{config.method.value} splits {keys[0]}-{keys[-1]}",
        callback=callback,
    )
    metrics = evaluate(
        model,
        likelihood,
        data.x_test,
        data.y_test,
        data.target_scale,
        ModelGenerators.for_keys(config.seed, keys, "eval"),
        samples=config.test_samples,
        stochastic=config.method not in (Method.ES, Method.MAP),
    )
    seconds = (time.perf_counter() - start) / len(keys)
    stopped = info.stopped_iteration
    results = [
        SplitResult(
            split=k,
            test_log_likelihood=float(metrics.log_likelihood[m]),
            test_rmse=float(metrics.rmse[m]),
            train_seconds=seconds,
            stopped_iteration=None if stopped is None else int(stopped[m]),
        )
        for m, k in enumerate(keys)
    ]
    return TrainedStack(model, likelihood, config, data, results)
