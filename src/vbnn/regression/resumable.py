"""Runs over UCI splits that keep what finishes: in the results database or as saved models.

* :func:`run_splits_resumable` trains only the splits the database lacks and writes every chunk
  in one transaction as soon as it finishes, so a killed sweep loses at most the chunk in flight.
* :func:`run_splits_saving_models` saves every trained chunk (``saved_models.save_model``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vbnn.core.contracts import RunResult, TrainConfig
from vbnn.data.uci import RegressionDataset
from vbnn.regression.engine import TrainedStack, run_splits
from vbnn.regression.saved_models import save_model
from vbnn.stores.results_db import ResultsDatabase


def run_splits_resumable(
    database: ResultsDatabase,
    dataset: RegressionDataset,
    split_ids: Sequence[int] | None,
    config: TrainConfig,
    progress: bool = False,
    extra: Mapping[str, Any] | None = None,
    per_split: Mapping[int, Mapping[str, float]] | None = None,
    stack_metrics: Callable[[TrainedStack], Mapping[int, Mapping[str, Any]]] | None = None,
) -> tuple[RunResult, list[int]]:
    """Like ``engine.run_splits``, but trains only the splits not yet stored.

    Each finished chunk is written in one transaction as soon as it finishes (``on_stack``), so a
    kill loses at most the chunk in flight. ``extra`` (e.g. the tuning protocol and the values it
    chose) is stored with the runs and is part of their key; ``per_split`` passes each split's
    own hyper-parameter values to the engine. ``stack_metrics`` computes further metrics of a
    trained chunk (split id -> {name: value}, e.g. pruned units per layer), stored in the same
    transaction and read back by ``ResultsDatabase.read_metrics``.

    Returns:
        (all requested splits as read back from the database, the splits trained by this call).
    """
    split_ids = list(range(dataset.num_splits)) if split_ids is None else list(split_ids)
    for k in split_ids:
        dataset.split(k)  # a clear error for a split that does not exist, before any training
    missing = database.missing_splits(dataset.name, split_ids, config, extra)
    trained: list[int] = []

    def store(stack: TrainedStack) -> None:
        metrics = stack_metrics(stack) if stack_metrics is not None else None
        database.write_results(dataset.name, config, stack.results, extra, metrics)
        trained.extend(stack.data.split_ids)

    if missing:
        run_splits(dataset, missing, config, progress, per_split, on_stack=store)
    stored = database.read_results(dataset.name, config, split_ids, extra)
    return RunResult(dataset=dataset.name, config=config, splits=tuple(stored)), trained


def run_splits_saving_models(
    dataset: RegressionDataset,
    split_ids: Sequence[int] | None,
    config: TrainConfig,
    folder: str | Path,
    progress: bool = False,
) -> tuple[RunResult, list[Path]]:
    """``engine.run_splits`` that also saves every trained chunk as soon as it finishes.

    Chunk c is written to ``folder / f"{method}-splits-{first}-{last}"``.

    Returns:
        (the results, the model folders written).
    """
    folders: list[Path] = []

    def save(trained: TrainedStack) -> None:
        keys = list(trained.data.split_ids)
        metrics = {str(r.split): r.test_log_likelihood for r in trained.results}
        folders.append(
            save_model(
                Path(folder) / f"{config.method.value}-splits-{keys[0]}-{keys[-1]}",
                trained.model,
                trained.likelihood,
                trained.config,
                dataset.inputs.shape[1],
                keys,
                dataset=dataset.name,
                metadata={"test_log_likelihood": metrics},
            )
        )

    result = run_splits(dataset, split_ids, config, progress, on_stack=save)
    return result, folders
