"""The UCI regression engine: any method on any set of splits, trained as batched model stacks.

Splits of equal size are stacked on the model dimension and trained in chunks. Batching amortises
Python and autograd overhead, which dominates small problems (boston), but a stack whose
activations fall out of the CPU cache runs slower per model than one model alone (power): the
chunk size keeps the activations of a chunk under ``CHUNK_ELEMENTS`` floats (benchmarks/README.md
has the measurements behind it). Every model draws from its own random streams, so the numbers do
not depend on the chunking.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch

from vbnn.core.contracts import SplitResult
from vbnn.core.randomness import ModelGenerators
from vbnn.core.runtime import keep_freed_memory
from vbnn.data.splits import StackedSplits, group_by_size, stack_splits
from vbnn.data.uci import RegressionDataset
from vbnn.layers.registry import family
from vbnn.networks.mlp import MLP
from vbnn.regression import sgld
from vbnn.regression.evaluation import PredictiveMetrics, evaluate, metrics_from_predictions
from vbnn.regression.full_batch import Problem, StepCallback, Validation, fit
from vbnn.regression.runs import (
    PER_MODEL_SETTINGS,
    EarlyStopping,
    ModelValues,
    PredictiveKind,
    RunResult,
    TrainConfig,
)
from vbnn.regression.saved_models import save_model
from vbnn.regression.stack import build_stack
from vbnn.stores.results_db import ResultsDatabase
from vbnn.sweeps.contracts import Unit
from vbnn.sweeps.driver import Runs, StoredRuns, train_missing
from vbnn.sweeps.executors import LocalExecutor
from vbnn.training.likelihoods import GaussianLikelihood

# Floats of one hidden activation tensor (models x rows x width) that a chunk may hold.
CHUNK_ELEMENTS = 1 << 19
# Floats of the full-covariance factors (models x D x D) that a chunk may hold.
CHUNK_COVARIANCE_ELEMENTS = 1 << 22


def choose_chunk_size(config: TrainConfig, train_rows: int, in_features: int, count: int) -> int:
    """How many models train together: all of them unless the chunk would leave the cache."""
    if config.chunk_size is not None:
        return min(config.chunk_size, count)
    width = max((*config.hidden, 1))
    per_model = train_rows * width * config.samples_per_step
    chunk = CHUNK_ELEMENTS // max(per_model, 1)
    spec = family(config.network_family)
    sizes = (in_features, *config.hidden, 1)
    largest = max(spec.covariance_elements(i, o) for i, o in pairwise(sizes))
    if largest > 0:  # a dense covariance factor per model (fc)
        chunk = min(chunk, CHUNK_COVARIANCE_ELEMENTS // largest)
    return max(1, min(count, chunk))


def _carve_validation(
    stopping: EarlyStopping, seed: int, data: StackedSplits, keys: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, Validation]:
    """Early stopping: hold out ``validation_fraction`` of each split's training rows (seeded
    per split)."""
    rows = data.x_train.shape[1]
    held_out = max(1, round(stopping.validation_fraction * rows))
    orders = ModelGenerators.for_keys(seed, keys, "validation").permutation(rows)
    order = torch.stack(orders).to(data.x_train.device)  # (M, rows)
    fit_rows, validation_rows = order[:, held_out:], order[:, :held_out]

    def take(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        if t.dim() == 3:
            return torch.gather(t, 1, index.unsqueeze(-1).expand(-1, -1, t.shape[-1]))
        return torch.gather(t, 1, index)

    validation = Validation(
        take(data.x_train, validation_rows), take(data.y_train, validation_rows)
    )
    return take(data.x_train, fit_rows), take(data.y_train, fit_rows), validation


@dataclass
class TrainedStack:
    """A trained stack, the data it saw, and its test metrics (one entry per model)."""

    model: MLP
    likelihood: GaussianLikelihood
    config: TrainConfig
    data: StackedSplits
    metrics: PredictiveMetrics
    stopped_iteration: torch.Tensor | None  # ES: (M,) iteration of the kept weights
    seconds_per_model: float
    saved_to: Path | None = None  # run_splits(save_models=...): the folder it was saved to

    @property
    def results(self) -> list[SplitResult]:
        """Per-split results in the data's order (split ids from ``data.split_ids``)."""
        stopped = self.stopped_iteration
        return [
            SplitResult(
                split=k,
                test_log_likelihood=float(self.metrics.log_likelihood[m]),
                test_rmse=float(self.metrics.rmse[m]),
                train_seconds=self.seconds_per_model,
                stopped_iteration=None if stopped is None else int(stopped[m]),
            )
            for m, k in enumerate(self.data.split_ids)
        ]


MakeCallback = Callable[[MLP, GaussianLikelihood], StepCallback]
# A trained chunk's further metrics to store: split id -> {name: value}.
StackMetrics = Callable[[TrainedStack], Mapping[int, Mapping[str, Any]]]


def train_stack(
    config: TrainConfig,
    data: StackedSplits,
    progress: bool = False,
    *,
    values: ModelValues | None = None,
    make_callback: MakeCallback | None = None,
) -> TrainedStack:
    """Train a stack on ``data``'s training part and evaluate it on its test part.

    The step below ``run_splits`` (the entry point over a data set's splits), for callers that
    hold the stacked data themselves: the tuner's candidates, a trajectory logger's run.

    Model m draws from the streams of key ``data.split_ids[m]`` (the tuner repeats one split's id
    so that its candidates share initialisation and noise: common random numbers).

    Args:
        values: per-model overrides of the config's values (tuning candidates).
        make_callback: called with the built model and likelihood; returns the
            ``training.fit`` step callback (e.g. a ``diagnostics.trajectories.TrajectoryLogger``).
    """
    start = time.perf_counter()
    keys = list(data.split_ids)
    device = training_device(config)
    data = data.to(device)
    values = (values or ModelValues()).to(device)
    model, likelihood = build_stack(config, data.x_train.shape[-1], keys, values)
    model, likelihood = model.to(device), likelihood.to(device)
    callback = make_callback(model, likelihood) if make_callback is not None else None
    x, y, validation = data.x_train, data.y_train, None
    stopping = config.early_stopping()
    if stopping is not None:
        x, y, validation = _carve_validation(stopping, config.seed, data, keys)
    problem = Problem(model, likelihood, x, y)
    train_streams = ModelGenerators.for_keys(config.seed, keys, "train")
    description = f"{config.method} splits {keys[0]}-{keys[-1]}"
    options = {"values": values, "progress": progress, "description": description}
    stopped = None
    if config.predictive.kind is PredictiveKind.CHAIN:  # SGLD: the samples its chain kept
        states = sgld.sample(config, problem, train_streams, **options)
        outputs, noise_stds = sgld.predictions(model, likelihood, states, data.x_test)
        metrics = metrics_from_predictions(outputs, noise_stds, data.y_test, data.target_scale)
    else:
        labels = [f"split {k}" for k in keys]
        info = fit(
            config,
            problem,
            train_streams,
            validation=validation,
            callback=callback,
            labels=labels,
            **options,
        )
        stopped = info.stopped_iteration
        metrics = _test_metrics(config, model, likelihood, data, keys)
    metrics = PredictiveMetrics(metrics.log_likelihood.cpu(), metrics.rmse.cpu())
    stopped = None if stopped is None else stopped.cpu()
    seconds = (time.perf_counter() - start) / len(keys)
    return TrainedStack(model, likelihood, config, data, metrics, stopped, seconds)


def _test_metrics(
    config: TrainConfig,
    model: MLP,
    likelihood: GaussianLikelihood,
    data: StackedSplits,
    keys: list[int],
) -> PredictiveMetrics:
    """The predictive metrics of the trained stack on ``data``'s test rows (the config's
    predictive; every model its own evaluation stream)."""
    predictive = config.predictive
    return evaluate(
        model,
        likelihood,
        data.x_test,
        data.y_test,
        data.target_scale,
        ModelGenerators.for_keys(config.seed, keys, "eval"),
        samples=predictive.samples,
        stochastic=predictive.stochastic,
    )


def training_device(config: TrainConfig) -> torch.device:
    """``config.device``, with a clear error when this machine has no such device."""
    device = torch.device(config.device)
    if device.type != "cuda":
        return device
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0 or (device.index or 0) >= count:
        raise RuntimeError(
            f"device={config.device!r} (--device, TrainConfig or BayesianRegressor): torch sees "
            f"{count} CUDA device(s) here"
        )
    return device


Overrides = Mapping[int, Mapping[str, float]]  # split id -> hyper-parameter values for it


def shared_settings(values: Mapping[str, float]) -> dict[str, float]:
    """The values that must agree across a stack (all but ``PER_MODEL_SETTINGS``)."""
    return {k: v for k, v in values.items() if k not in PER_MODEL_SETTINGS}


def _train_with_split_values(
    config: TrainConfig,
    data: StackedSplits,
    progress: bool = False,
    per_split: Overrides | None = None,
) -> TrainedStack:
    """``train_stack`` with each split's own values from ``per_split`` (tuned per split).

    Only ``PER_MODEL_SETTINGS`` may differ inside one stack; others must agree (``run_splits``
    chunks accordingly).
    """
    if not per_split:
        return train_stack(config, data, progress)
    values = [per_split[k] for k in data.split_ids]
    shared = shared_settings(values[0])
    if any(shared_settings(v) != shared for v in values):
        raise ValueError(f"run_splits: splits {list(data.split_ids)} need different {shared}")
    per_model = ModelValues(
        **{
            name: torch.tensor([v[name] for v in values], dtype=config.torch_dtype)
            for name in PER_MODEL_SETTINGS
            if name in values[0]
        }
    )
    return train_stack(dataclasses.replace(config, **shared), data, progress, values=per_model)


def _save(trained: TrainedStack, folder: Path, dataset: RegressionDataset) -> Path:
    """Save a trained chunk to ``folder / f"{method}-splits-{first}-{last}"``."""
    keys = list(trained.data.split_ids)
    metrics = {str(r.split): r.test_log_likelihood for r in trained.results}
    return save_model(
        folder / f"{trained.config.method}-splits-{keys[0]}-{keys[-1]}",
        trained.model,
        trained.likelihood,
        trained.config,
        dataset.inputs.shape[1],
        keys,
        dataset=dataset.name,
        metadata={"test_log_likelihood": metrics},
    )


def stack_chunks(
    dataset: RegressionDataset,
    config: TrainConfig,
    split_ids: Sequence[int],
    per_split: Overrides | None = None,
) -> list[list[int]]:
    """The stacks ``run_splits`` trains, in order: splits of equal size in chunks of
    ``choose_chunk_size``; one split a stack when ``per_split`` values disagree on a setting
    one Adam cannot vary per model (``shared_settings``)."""
    separate = per_split is not None and (
        len({tuple(sorted(shared_settings(v).items())) for v in per_split.values()}) > 1
    )
    chunks = []
    for group in group_by_size(dataset, split_ids):
        train_rows = len(dataset.split(group[0])[0])
        chunk = choose_chunk_size(config, train_rows, dataset.inputs.shape[1], len(group))
        chunk = 1 if separate else chunk
        chunks.extend(group[begin : begin + chunk] for begin in range(0, len(group), chunk))
    return chunks


def run_splits(
    dataset: RegressionDataset,
    split_ids: Sequence[int] | None,
    config: TrainConfig,
    progress: bool = False,
    per_split: Overrides | None = None,
    on_stack: Callable[[TrainedStack], None] | None = None,
    *,
    database: ResultsDatabase | None = None,
    extra: Mapping[str, Any] | None = None,
    stack_metrics: StackMetrics | None = None,
    save_models: str | Path | None = None,
) -> RunResult:
    """Run the config's method on the given splits (all when None), chunked batches of models.

    The one entry point for UCI training (the CLI, the sweeps and the reproductions call it), so
    each independent option stays a keyword; the keyword-only ones concern the stored runs.
    Every trained chunk is handled as soon as it finishes (stored, saved, then ``on_stack``), so
    a killed run loses at most the chunk in flight.

    Args:
        per_split: each split id's own hyper-parameter values (``--tune per-split``).
        on_stack: called with every trained chunk (after it is stored and saved).
        database: resume from this results database: train only the splits it lacks, write
            every chunk in one transaction, and return all requested splits as read back from
            it (through the driver of every stored run, ``sweeps.driver``, in this process
            and on this process's torch threads).
        extra: with ``database``, stored with the runs and part of their key (e.g. the tuning
            protocol and the values it chose).
        stack_metrics: with ``database``, further metrics of a trained chunk (split id ->
            {name: value}, e.g. pruned units per layer), stored in the same transaction and read
            back by ``ResultsDatabase.read_metrics``.
        save_models: save every trained chunk to ``save_models / f"{method}-splits-{first}-
            {last}"`` (``saved_models.save_model``); the chunk's ``saved_to`` names the folder.
    """
    if database is None and (extra is not None or stack_metrics is not None):
        raise ValueError("run_splits: extra and stack_metrics are stored, so need a database")
    keep_freed_memory()
    split_ids = list(range(dataset.num_splits)) if split_ids is None else list(split_ids)
    to_train = _splits_to_train(dataset, split_ids, config, per_split, database, extra)
    notes = () if per_split is None else (f"per-split values: {dict(per_split)}",)

    def train(chunk: list[int]) -> TrainedStack:
        data = stack_splits(dataset, chunk, config.torch_dtype)
        return _train_with_split_values(config, data, progress, per_split)

    handle = _handler(dataset, save_models, on_stack)
    if database is not None:
        runs = Runs(dataset.name, config, tuple(split_ids), extra)
        (stored,) = _train_stored(dataset, runs, database, per_split, stack_metrics, train, handle)
        return RunResult(dataset=dataset.name, config=config, splits=stored.results, notes=notes)
    results: list[SplitResult] = []
    for chunk in stack_chunks(dataset, config, to_train, per_split):
        trained = train(chunk)
        handle(trained)
        results.extend(trained.results)
    results.sort(key=lambda r: r.split)
    return RunResult(dataset=dataset.name, config=config, splits=tuple(results), notes=notes)


def _handler(
    dataset: RegressionDataset,
    save_models: str | Path | None,
    on_stack: Callable[[TrainedStack], None] | None,
) -> Callable[[TrainedStack], None]:
    """What ``run_splits`` does with a trained chunk: save it (with ``save_models``), then
    ``on_stack``."""

    def handle(trained: TrainedStack) -> None:
        if save_models is not None:
            trained.saved_to = _save(trained, Path(save_models), dataset)
        if on_stack is not None:
            on_stack(trained)

    return handle


def _splits_to_train(
    dataset: RegressionDataset,
    split_ids: list[int],
    config: TrainConfig,
    per_split: Overrides | None,
    database: ResultsDatabase | None,
    extra: Mapping[str, Any] | None,
) -> list[int]:
    """The splits of ``split_ids`` that ``database`` lacks (all without one); ValueError for a
    split the data set does not have or ``per_split`` has no values for, before any training."""
    for k in split_ids:
        dataset.split(k)
    to_train = split_ids
    if database is not None:
        to_train = database.missing_splits(dataset.name, split_ids, config, extra)
    for k in to_train:
        if per_split is not None and k not in per_split:
            raise ValueError(f"run_splits: no hyper-parameter values for split {k}")
    return to_train


# Parameters: ``run_splits``' pieces for a database (one call site)
def _train_stored(
    dataset: RegressionDataset,
    runs: Runs,
    database: ResultsDatabase,
    per_split: Overrides | None,
    stack_metrics: StackMetrics | None,
    train: Callable[[list[int]], TrainedStack],
    handle: Callable[[TrainedStack], None],
) -> list[StoredRuns]:
    """``run_splits(database=...)`` through the driver: one unit a stack, run here (the local
    executor, on this process's torch threads, a unit's exception raised as it is); each stack
    is stored as it finishes, then saved and handed to ``on_stack``."""
    trained_stacks: dict[tuple[int, ...], TrainedStack] = {}

    def train_chunk(chunk: list[int]) -> tuple[list[SplitResult], Mapping[int, Any]]:
        trained = trained_stacks[tuple(chunk)] = train(chunk)
        return trained.results, stack_metrics(trained) if stack_metrics is not None else {}

    def build_units(runs: Runs, missing: list[int]) -> list[Unit]:
        threads = torch.get_num_threads()
        return [
            Unit(f"{runs.name} splits {chunk[0]}-{chunk[-1]}", train_chunk, (chunk,), threads)
            for chunk in stack_chunks(dataset, runs.config, missing, per_split)
        ]

    def stored(unit: Unit, _: Any) -> None:
        handle(trained_stacks.pop(tuple(unit.arguments[0])))

    executor = LocalExecutor(raise_errors=True)
    return train_missing(database, [runs], build_units, executor, on_stored=stored)
