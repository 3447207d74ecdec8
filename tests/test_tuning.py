"""Tuning: no test row is seen, stacked candidates equal candidates alone, studies resume."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import optuna
import pytest

from vbnn.core.contracts import Method, TrainConfig
from vbnn.data import load_uci
from vbnn.regression import tuning
from vbnn.regression.engine import run_splits, train_stack
from vbnn.regression.tuning import (
    TuningConfig,
    evaluate_candidates,
    tune,
    tuning_problem,
    tuning_rows,
)


def test_tuning_rows_come_from_the_training_rows_only(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    for split in (0, 7):
        train, test = boston.split(split)
        fit_rows, validation_rows = tuning_rows(boston, split, 0.2, seed=0)
        assert set(fit_rows) | set(validation_rows) == set(train)
        assert not set(fit_rows) & set(validation_rows)
        assert not (set(fit_rows) | set(validation_rows)) & set(test)
        assert len(validation_rows) == round(0.2 * len(train))


@pytest.mark.parametrize(
    ("method", "candidates"),
    [
        (Method.MF, [{"prior_std": 0.3}, {"prior_std": 1.0}, {"prior_std": 3.0}]),
        (
            Method.GD,
            [{"prior_std": 0.5, "posterior_std": 0.01}, {"prior_std": 2.0, "posterior_std": 0.1}],
        ),
        (Method.FC, [{"prior_std": 0.3}, {"prior_std": 3.0}]),
        (
            Method.SGLD,
            [{"prior_std": 0.5, "step_size": 0.01}, {"prior_std": 2.0, "step_size": 0.2}],
        ),
    ],
)
def test_candidates_in_one_stack_score_as_alone(
    data_dir: Path, method: Method, candidates: list[dict[str, float]]
) -> None:
    boston = load_uci("boston", data_dir)
    config = TrainConfig(method=method, iterations=40, test_samples=5, hidden=(10,))
    data = tuning_problem(boston, 0, 0.2, 0, config.torch_dtype)
    together = evaluate_candidates(config, data, candidates)
    alone = [evaluate_candidates(config, data, [c])[0] for c in candidates]
    assert together == pytest.approx(alone, rel=1e-4)
    assert len(set(together)) == len(together)  # the values do reach the models


def test_per_split_values_in_one_stack_equal_separate_runs(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    config = TrainConfig(method=Method.MAP, iterations=40, hidden=(10,))
    values = {0: {"prior_std": 0.2}, 3: {"prior_std": 5.0}}
    together = run_splits(boston, [0, 3], config, per_split=values)
    for result in together.splits:
        alone = run_splits(
            boston, [result.split], TrainConfig(**{**config.__dict__, **values[result.split]})
        )
        assert result.test_log_likelihood == pytest.approx(
            alone.splits[0].test_log_likelihood, rel=1e-5
        )


def test_a_study_resumes_from_its_storage(data_dir: Path, tmp_path: Path) -> None:
    boston = load_uci("boston", data_dir)
    storage = f"sqlite:///{tmp_path / 'study.sqlite'}"
    config = TrainConfig(method=Method.MAP, iterations=20, hidden=(5,))
    tune(boston, 0, config, TuningConfig(trials=4, batch=2), storage)
    best = tune(boston, 0, config, TuningConfig(trials=6, batch=2), storage)
    (study,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=study.study_name, storage=storage).trials
    assert len(trials) == 6  # four kept, two new
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert 0.01 <= best["prior_std"] <= 10.0
    assert np.isclose(max(t.value for t in trials), study.best_trial.value)


def test_splits_sharing_a_learning_rate_still_train_as_one_stack(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    config = TrainConfig(method=Method.ES, iterations=30, hidden=(5,))
    stacks = []
    shared = {k: {"learning_rate": 0.01} for k in (0, 1, 2)}
    run_splits(boston, [0, 1, 2], config, per_split=shared, on_stack=stacks.append)
    assert [s.data.split_ids for s in stacks] == [(0, 1, 2)]
    own = {0: {"learning_rate": 0.01}, 1: {"learning_rate": 0.02}, 2: {"learning_rate": 0.01}}
    stacks.clear()
    run_splits(boston, [0, 1, 2], config, per_split=own, on_stack=stacks.append)
    assert [s.data.split_ids for s in stacks] == [(0,), (1,), (2,)]


def test_a_killed_round_keeps_the_candidates_it_finished(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a set whose stacks hold one model, a round of 4 killed in its third model keeps two."""
    boston = load_uci("boston", data_dir)
    storage = f"sqlite:///{tmp_path / 'study.sqlite'}"
    config = TrainConfig(method=Method.MAP, iterations=20, hidden=(5,), chunk_size=1)
    calls = []

    def counted(*args, kill_on: int | None = None, **kwargs):
        calls.append(args)
        if len(calls) == kill_on:
            raise KeyboardInterrupt
        return train_stack(*args, **kwargs)

    monkeypatch.setattr(tuning, "train_stack", partial(counted, kill_on=3))
    with pytest.raises(KeyboardInterrupt):
        tune(boston, 0, config, TuningConfig(trials=4, batch=4), storage)
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    assert [t.state for t in study.trials].count(optuna.trial.TrialState.COMPLETE) == 2
    calls.clear()
    monkeypatch.setattr(tuning, "train_stack", counted)
    tune(boston, 0, config, TuningConfig(trials=4, batch=4), storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) == 4
    assert len(calls) == 2  # the resumed search trained only the two it lacked
