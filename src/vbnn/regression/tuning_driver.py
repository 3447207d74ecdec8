"""The one tuning loop: studies short of their trials -> units -> executor -> stored -> values.

The tuning half of the driver of stored runs (``sweeps.driver`` trains the replicates a results
database lacks; :func:`tune_missing` completes the Optuna studies a storage lacks): every caller
that tunes before it trains goes through here, ``vbnn.compare`` (``comparison.run``, one study
per fold) and the lab's UCI reproductions (``overpruning``, ``uci-depth``). A study is one
(data set, split tuned, config) under ``regression.tuning.study_name``; its search is
``regression.tuning.tune`` on that split's training rows.

- :func:`tuning_unit` runs (the rest of) one study (:func:`study_units` makes the units of the
  studies still short of their trials, :func:`trial_keeper` is the driver's callback). Given
  the study's storage (this process) it writes there as it goes, as ``tuning.tune`` does;
  given none (a worker process or a Ray task), it continues an in-memory copy of every trial
  stored so far (a killed search's unfinished ones too) and returns the trials it finished,
  which the driver adds to its storage (:func:`store_trials`), retiring its own unfinished
  ones. The sampler sees the same history with the same seed either way, so it proposes the
  same candidates and the study ends with the same trials on every executor.
- :func:`tune_missing` runs those units and reads every study's best values back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import optuna

from vbnn.data.uci import RegressionDataset
from vbnn.regression.runs import TrainConfig
from vbnn.regression.studies import (
    FINISHED,
    RUNNING,
    abandon,
    finish_queued,
    is_abandoned,
    used_budget,
)
from vbnn.regression.tuning import TuningConfig, hidden_label, study_name, tune
from vbnn.sweeps.contracts import ExecutorKind, ExecutorSettings, Unit
from vbnn.sweeps.executors import run_sweep

Study = tuple[RegressionDataset, int, TrainConfig]  # (data set, split tuned, config)


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
    studies: Sequence[Study],
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
        hidden = hidden_label(config.hidden)
        key = f"tune {dataset.name} {config.method} hidden {hidden} split {split}"
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


def tune_missing(
    storage: optuna.storages.BaseStorage,
    studies: Sequence[Study],
    tuning: TuningConfig,
    executor: ExecutorSettings | None = None,
    *,
    progress: bool = False,
) -> list[dict[str, float]]:
    """Complete every study ``storage`` holds too few trials of, then read each one's best values.

    The studies short of ``tuning.trials`` run as units of a fresh executor of ``executor``
    (closed afterwards), each on ``executor.cpus_per_unit`` torch threads; on any executor but
    the local one a unit searches an in-memory copy and the driver stores the trials it returns
    (:func:`trial_keeper`), so this process alone writes ``storage``. A complete study is not
    searched again: a second identical call trains nothing.

    Args:
        storage: the Optuna storage of the studies (e.g. ``stores.results_db.optuna_storage``).
        studies: (data set, split tuned, config) of every study, named by
            ``regression.tuning.study_name`` with ``tuning.seed``.
        tuning: the trials per study, the batch and the validation rows of every search.
        executor: where the units run (None: this process).
        progress: show the progress bar of units ("tuning").

    Returns:
        Each study's best values (e.g. ``{"prior_std": 0.8}``), in the order of ``studies``.

    Raises:
        SweepError: some searches failed (``sweeps.executors.drive``); the others are stored.
    """
    settings = executor or ExecutorSettings()
    remote = settings.kind is not ExecutorKind.LOCAL
    units = study_units(studies, tuning, storage, remote, settings.cpus_per_unit)
    run_sweep(settings, units, trial_keeper(storage, remote), "tuning", progress)
    # every study is complete now: tune() reads its best values without training
    return [tune(dataset, split, config, tuning, storage) for dataset, split, config in studies]
