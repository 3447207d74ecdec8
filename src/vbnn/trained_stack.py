"""Train one stack of splits and keep the trained model (``engine.run_stack`` keeps only metrics).

Saving a model, the over-pruning diagnostics and the training trajectories need the trained
stack itself; :func:`train_stack` follows ``engine.run_stack`` step for step (same random
streams, same validation carve for ES), so its metrics equal those of ``run_stack``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vbnn.data.splits import StackedSplits, group_by_size, stack_splits
from vbnn.data.uci import RegressionDataset
from vbnn.engine import _carve_validation, build_stack
from vbnn.evaluation import evaluate
from vbnn.models import MLP, GaussianLikelihood
from vbnn.random import ModelGenerators
from vbnn.training import StepCallback, fit
from vbnn.types import Method, RunResult, SplitResult, TrainConfig


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
    make_callback: Callable[[MLP, GaussianLikelihood], StepCallback] | None = None,
) -> TrainedStack:
    """Build, fit and evaluate one stack exactly as ``engine.run_stack`` does, keeping the model.

    ``callback(iteration, terms)`` is passed to ``training.fit``; ``make_callback(model,
    likelihood)``, called once the stack is built, makes one that needs the model (a
    ``diagnostics.trajectories.TrajectoryLogger``).
    """
    start = time.perf_counter()
    keys = list(data.split_ids)
    model, likelihood = build_stack(config, data.x_train.shape[-1], keys)
    if make_callback is not None:
        if callback is not None:
            raise ValueError("train_stack: pass callback or make_callback, not both")
        callback = make_callback(model, likelihood)
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


def run_splits_saving_models(
    dataset: RegressionDataset,
    split_ids: Sequence[int] | None,
    config: TrainConfig,
    folder: str | Path,
    progress: bool = False,
) -> tuple[RunResult, list[Path]]:
    """``engine.run_splits`` that also saves every trained chunk with ``io.save_model``.

    Chunk c is written to ``folder / f"{method}-splits-{first}-{last}"`` as soon as it finishes.

    Returns:
        (the results, the model folders written).
    """
    from vbnn.engine import choose_chunk_size
    from vbnn.io import save_model

    split_ids = list(range(dataset.num_splits)) if split_ids is None else list(split_ids)
    for k in split_ids:
        dataset.split(k)
    results: list[SplitResult] = []
    folders: list[Path] = []
    for group in group_by_size(dataset, split_ids):
        train_rows = len(dataset.split(group[0])[0])
        chunk = choose_chunk_size(config, train_rows, dataset.inputs.shape[1], len(group))
        for begin in range(0, len(group), chunk):
            keys = group[begin : begin + chunk]
            trained = train_stack(config, stack_splits(dataset, keys, config.torch_dtype), progress)
            results.extend(trained.results)
            name = f"{config.method.value}-splits-{keys[0]}-{keys[-1]}"
            metrics = {str(r.split): r.test_log_likelihood for r in trained.results}
            folders.append(
                save_model(
                    Path(folder) / name, trained.model, trained.likelihood, config,
                    dataset.inputs.shape[1], keys, dataset=dataset.name,
                    metadata={"test_log_likelihood": metrics},
                )
            )  # fmt: skip
    results.sort(key=lambda r: r.split)
    return RunResult(dataset=dataset.name, config=config, splits=tuple(results)), folders
