"""Units of UCI work for an executor: train splits, tune a study; the driver stores what they
return (``sweeps.command`` for ``vbnn sweep``, ``experiments.overpruning`` for Table 1,
``experiments.uci_depth``).

- :func:`split_units` cuts the splits a configuration still lacks into the stacks the engine
  would train together (``engine.choose_chunk_size``), so a unit is one chunk: a local run
  stores what it stored before, chunk by chunk.
- :func:`train_unit` trains one chunk and returns its ``SplitResult`` rows;
  :func:`train_unit_with_metrics` also returns further per-split metrics of the trained stack
  (``stack_metrics``, e.g. pruned units per layer), stored with the rows.
- :func:`add_study_arguments` gives the two UCI reproductions their shared command-line options.
- :func:`tuning_unit` runs (the rest of) one Optuna study (:func:`study_units` makes the units
  of the studies still short of their trials, :func:`trial_keeper` is the driver's callback).
  Given the study's storage (this process) it writes there as it goes, as ``tuning.tune``
  always did; given none (a Ray worker), it continues an in-memory copy of every trial stored so
  far (a killed search's unfinished ones too) and returns the trials it finished, which the
  driver adds to its storage (:func:`store_trials`), retiring its own unfinished ones. The
  sampler sees the same history with the same seed either way, so it proposes the same
  candidates.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna

from vbnn.core.contracts import SplitResult, TrainConfig
from vbnn.data.splits import group_by_size
from vbnn.data.uci import RegressionDataset
from vbnn.regression.engine import TrainedStack, choose_chunk_size, run_splits
from vbnn.regression.studies import (
    FINISHED,
    RUNNING,
    abandon,
    finish_queued,
    is_abandoned,
    used_budget,
)
from vbnn.regression.tuning import TuningConfig, study_name, tune
from vbnn.sweeps.executors import Unit

StackMetrics = Callable[[TrainedStack], Mapping[int, Mapping[str, Any]]]


def add_study_arguments(
    parser: argparse.ArgumentParser,
    out: str,
    quick_help: str,
    datasets: Sequence[str],
    methods: Sequence[str],
    splits_help: str,
) -> None:
    """The options of a UCI study shared by ``reproduce overpruning`` and ``uci-depth``."""
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--datasets", default=None, help=f"comma list (default: {datasets})")
    parser.add_argument("--methods", default=None, help=f"comma list (default: {methods})")
    parser.add_argument("--splits", default=None, help=splits_help)
    parser.add_argument("--iterations", type=int, default=None, help="override every run's")
    parser.add_argument("--trials", type=int, default=None, help="tuning candidates per study")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compile", action="store_true", help="fuse each training step (torch.compile; needs g++)"
    )
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--no-progress", action="store_true")


def split_units(
    dataset: RegressionDataset, config: TrainConfig, splits: Sequence[int], size: int | None
) -> list[list[int]]:
    """``splits`` cut into units of ``size`` splits (None: the engine's chunks for ``config``)."""
    units = []
    for group in group_by_size(dataset, splits):
        rows = len(dataset.split(group[0])[0])
        chunk = size or choose_chunk_size(config, rows, dataset.inputs.shape[1], len(group))
        units.extend(group[begin : begin + chunk] for begin in range(0, len(group), chunk))
    return units


def train_unit(
    dataset: RegressionDataset,
    splits: list[int],
    config: TrainConfig,
    per_split: Mapping[int, Mapping[str, float]] | None = None,
) -> list[SplitResult]:
    """``config`` on ``splits`` (each split's own tuned values in ``per_split``)."""
    return list(run_splits(dataset, splits, config, per_split=per_split).splits)


def train_unit_with_metrics(
    dataset: RegressionDataset,
    splits: list[int],
    config: TrainConfig,
    per_split: Mapping[int, Mapping[str, float]] | None,
    stack_metrics: StackMetrics,
) -> tuple[list[SplitResult], dict[int, Mapping[str, Any]]]:
    """Like :func:`train_unit`; also ``stack_metrics`` of every trained stack (split -> values)."""
    metrics: dict[int, Mapping[str, Any]] = {}

    def measure(stack: TrainedStack) -> None:
        metrics.update(stack_metrics(stack))

    result = run_splits(dataset, splits, config, per_split=per_split, on_stack=measure)
    return list(result.splits), metrics


def stored_trials(storage: optuna.storages.BaseStorage | str, name: str) -> list:
    """Every trial of study ``name`` in ``storage``, by number (none if it is absent)."""
    try:
        return optuna.load_study(study_name=name, storage=storage).trials
    except KeyError:
        return []


def finished_here(
    trials: Sequence[optuna.trial.FrozenTrial], stored: Sequence[optuna.trial.FrozenTrial]
) -> list[optuna.trial.FrozenTrial]:
    """The trials a search finished on top of ``stored``: new ones, or queued ones it asked."""
    return [
        t
        for t in trials
        if t.state in FINISHED
        and not is_abandoned(t)
        and (t.number >= len(stored) or stored[t.number].state not in FINISHED)
    ]


def tuning_unit(
    dataset: RegressionDataset,
    split: int,
    config: TrainConfig,
    tuning: TuningConfig,
    storage: optuna.storages.BaseStorage | None = None,
    stored: Sequence[optuna.trial.FrozenTrial] = (),
) -> list[optuna.trial.FrozenTrial]:
    """Tune until the study holds ``tuning.trials`` trials; returns the trials this call added.

    Args:
        storage: the study's own storage (written as the search goes), or None: then the search
            continues an in-memory study holding the ``stored`` trials.
    """
    name = study_name(dataset.name, split, config, tuning.seed)
    if storage is None:
        storage = optuna.storages.InMemoryStorage()
        optuna.create_study(study_name=name, storage=storage, direction="maximize").add_trials(
            stored
        )
    before = stored_trials(storage, name)
    tune(dataset, split, config, tuning, storage)
    return finished_here(stored_trials(storage, name), before)


def store_trials(
    storage: optuna.storages.BaseStorage | str,
    dataset: str,
    split: int,
    config: TrainConfig,
    tuning: TuningConfig,
    trials: Sequence[optuna.trial.FrozenTrial],
) -> None:
    """The driver's half of a remote :func:`tuning_unit`: add its trials to the stored study.

    The unit re-ran the candidates of this study's unfinished trials (``tuning.tune``): the
    running ones are abandoned here as they were there, and the queued ones it finished are
    finished in place, so the study ends as a local search would have left it.
    """
    name = study_name(dataset, split, config, tuning.seed)
    study = optuna.create_study(
        study_name=name, storage=storage, direction="maximize", load_if_exists=True
    )
    before = len(study.trials)
    for trial in study.trials:
        if trial.state == RUNNING:
            abandon(study, trial)
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.number < before:
            finish_queued(study, trial)
        else:
            study.add_trial(trial)


def study_units(
    studies: Sequence[tuple[RegressionDataset, int, TrainConfig]],
    tuning: TuningConfig,
    storage: optuna.storages.BaseStorage,
    remote: bool,
    cpus: int | None,
) -> list[Unit]:
    """One :func:`tuning_unit` per study (data set, split tuned, config) still short of its
    trials: writing to ``storage`` as it goes here, or on an in-memory copy when ``remote``."""
    units = []
    for dataset, split, config in studies:
        stored = stored_trials(storage, study_name(dataset.name, split, config, tuning.seed))
        if used_budget(stored) >= tuning.trials:
            continue
        where = (None, stored) if remote else (storage,)
        hidden = "x".join(str(width) for width in config.hidden)
        key = f"tune {dataset.name} {config.method.value} hidden {hidden} split {split}"
        units.append(Unit(key, tuning_unit, (dataset, split, config, tuning, *where), cpus))
    return units


def trial_keeper(
    storage: optuna.storages.BaseStorage, remote: bool
) -> Callable[[Unit, list[optuna.trial.FrozenTrial]], None]:
    """The driver's callback for :func:`study_units`: a remote unit's trials into ``storage``
    (a local unit has written them already)."""

    def keep(unit: Unit, trials: list[optuna.trial.FrozenTrial]) -> None:
        if remote:
            dataset, split, config, tuning = unit.arguments[:4]
            store_trials(storage, dataset.name, split, config, tuning, trials)

    return keep
