"""Tuning: no test row is seen, stacked candidates equal candidates alone, studies resume (a
killed round completed, not replayed)."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import numpy as np
import optuna
import pytest

from vbnn.core.randomness import derive_seed
from vbnn.data import load_uci
from vbnn.regression import tuning
from vbnn.regression.engine import run_splits, train_stack
from vbnn.regression.methods import method_config, taken_by
from vbnn.regression.studies import requeue_unfinished, sampler_seed, used_budget
from vbnn.regression.tuning import (
    TuningConfig,
    evaluate_candidates,
    tune,
    tuning_problem,
    tuning_rows,
)
from vbnn.regression.tuning_driver import store_trials, stored_trials, tuning_unit


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
        ("mf", [{"prior_std": 0.3}, {"prior_std": 1.0}, {"prior_std": 3.0}]),
        (
            "gd",
            [{"prior_std": 0.5, "posterior_std": 0.01}, {"prior_std": 2.0, "posterior_std": 0.1}],
        ),
        ("fc", [{"prior_std": 0.3}, {"prior_std": 3.0}]),
        (
            "sgld",
            [{"prior_std": 0.5, "step_size": 0.01}, {"prior_std": 2.0, "step_size": 0.2}],
        ),
    ],
)
def test_candidates_in_one_stack_score_as_alone(
    data_dir: Path, method: str, candidates: list[dict[str, float]]
) -> None:
    boston = load_uci("boston", data_dir)
    values = {"iterations": 40, "test_samples": 5, "hidden": (10,)}
    config = method_config(method, **taken_by(method, values))
    data = tuning_problem(boston, 0, 0.2, 0, config.torch_dtype)
    together = evaluate_candidates(config, data, candidates)
    alone = [evaluate_candidates(config, data, [c])[0] for c in candidates]
    assert together == pytest.approx(alone, rel=1e-4)
    assert len(set(together)) == len(together)  # the values do reach the models


def test_per_split_values_in_one_stack_equal_separate_runs(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    config = method_config("map", iterations=40, hidden=(10,))
    values = {0: {"prior_std": 0.2}, 3: {"prior_std": 5.0}}
    together = run_splits(boston, [0, 3], config, per_split=values)
    for result in together.splits:
        alone = run_splits(
            boston, [result.split], dataclasses.replace(config, **values[result.split])
        )
        assert result.test_log_likelihood == pytest.approx(
            alone.splits[0].test_log_likelihood, rel=1e-5
        )


def test_a_study_resumes_from_its_storage(data_dir: Path, tmp_path: Path) -> None:
    boston = load_uci("boston", data_dir)
    storage = f"sqlite:///{tmp_path / 'study.sqlite'}"
    config = method_config("map", iterations=20, hidden=(5,))
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
    config = method_config("es", iterations=30, hidden=(5,))
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
    config = method_config("map", iterations=20, hidden=(5,), chunk_size=1)
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


def scored(trials: list) -> dict[float, float]:
    """prior std -> validation score of the complete trials."""
    return {
        t.params["prior_std"]: t.value
        for t in trials
        if t.state == optuna.trial.TrialState.COMPLETE
    }


def test_a_resumed_search_completes_the_killed_round(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after two of a round of four, the search resumes with the round's other two
    candidates (not new ones, nor the two it scored again), abandons their running trials, and
    ends with the uninterrupted search's four candidates and scores."""
    boston, config, budget, killed = killed_study(
        data_dir, tmp_path / "killed.sqlite", monkeypatch, queued=False
    )
    whole = f"sqlite:///{tmp_path / 'whole.sqlite'}"
    tune(boston, 0, config, budget, whole)
    (summary,) = optuna.get_all_study_summaries(whole)
    uninterrupted = scored(optuna.load_study(study_name=summary.study_name, storage=whole).trials)
    tune(boston, 0, config, budget, killed)
    trials = optuna.load_study(study_name=summary.study_name, storage=killed).trials
    abandoned = [t for t in trials if t.user_attrs.get("abandoned")]
    assert len(abandoned) == 2 and all(t.state == optuna.trial.TrialState.FAIL for t in abandoned)
    assert used_budget(trials) == 4
    assert scored(trials) == uninterrupted  # the same candidates, scored exactly alike


def test_a_shared_study_leaves_running_trials_alone(data_dir: Path, tmp_path: Path) -> None:
    """With workers sharing a study, another worker's running trial is live: kept running, not
    re-run, and counted as spent, so the workers together stop at the budget."""
    boston = load_uci("boston", data_dir)
    storage = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    config = method_config("map", iterations=20, hidden=(5,))
    name = "boston/shared"
    live = optuna.create_study(study_name=name, storage=storage, direction="maximize").ask()
    live.suggest_float("prior_std", 0.01, 10.0, log=True)
    tune(boston, 0, config, TuningConfig(trials=2, batch=2), storage, name=name, sole_writer=False)
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert trials[0].state == optuna.trial.TrialState.RUNNING and not trials[0].user_attrs
    assert used_budget(trials) == 1 and trials[1].user_attrs == {"worker": 0}


def test_a_worker_run_again_requeues_only_its_own_running_trials(
    data_dir: Path, tmp_path: Path
) -> None:
    """Worker 1's process died mid-round (its trial is still running) while worker 0 scores
    one: run again, worker 1 abandons and re-scores its own candidate only, leaving room for
    worker 0's."""
    boston = load_uci("boston", data_dir)
    storage = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    config = method_config("map", iterations=20, hidden=(5,))
    name = "boston/shared"
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    for worker in (1, 0):
        trial = study.ask()
        trial.set_user_attr("worker", worker)
        trial.suggest_float("prior_std", 0.01, 10.0, log=True)
    dead, live = study.trials
    tuning = TuningConfig(trials=3, batch=3)
    tune(boston, 0, config, tuning, storage, worker=1, name=name, sole_writer=False)
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert trials[0].state == optuna.trial.TrialState.FAIL and trials[0].user_attrs["abandoned"]
    assert trials[1].state == optuna.trial.TrialState.RUNNING  # worker 0's, live
    scored = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(scored) == 2 and all(t.user_attrs["worker"] == 1 for t in scored)
    assert scored[0].params == dead.params and live.params not in [t.params for t in scored]


def test_sampler_seed_keeps_a_new_study_and_moves_a_resumed_one() -> None:
    new = sampler_seed(0, 0, 0, 0)
    assert new == derive_seed(0, 0, "tuning") % 2**32  # what every study so far was drawn with
    assert sampler_seed(0, 0, 1, 0) == (new + 1) % 2**32
    resumed = {sampler_seed(0, 0, 0, n) for n in (3, 4, 30)}
    assert len(resumed) == 3 and new not in resumed


def killed_study(data_dir: Path, path: Path, monkeypatch: pytest.MonkeyPatch, queued: bool):
    """A study of 4 MAP candidates killed after scoring two (then, if ``queued``, a resumed
    search killed right after queueing the other two): (dataset, config, budget, storage)."""
    boston = load_uci("boston", data_dir)
    config = method_config("map", iterations=20, hidden=(5,), chunk_size=1)
    budget = TuningConfig(trials=4, batch=4)
    storage = f"sqlite:///{path}"

    def kill_on_third(*args, calls=[], **kwargs):  # noqa: B006 - counts across calls
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return train_stack(*args, **kwargs)

    monkeypatch.setattr(tuning, "train_stack", kill_on_third)
    with pytest.raises(KeyboardInterrupt):
        tune(boston, 0, config, budget, storage)
    monkeypatch.setattr(tuning, "train_stack", train_stack)
    if queued:
        (summary,) = optuna.get_all_study_summaries(storage)
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        assert len(requeue_unfinished(study, budget.trials)) == 2
    return boston, config, budget, storage


def trial_records(storage: str) -> list[tuple]:
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    return [(t.number, t.state, t.params, t.value, t.user_attrs) for t in trials]


@pytest.mark.parametrize("queued", [False, True], ids=["running", "queued"])
def test_a_remote_resume_leaves_the_study_a_local_resume_leaves(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queued: bool
) -> None:
    """Resuming a killed study on an in-memory copy (a Ray worker) and storing what it returns
    gives the same trials, numbers, states and scores as resuming it in place."""
    boston, config, budget, local = killed_study(
        data_dir, tmp_path / "local.sqlite", monkeypatch, queued
    )
    *_, remote = killed_study(data_dir, tmp_path / "remote.sqlite", monkeypatch, queued)
    assert trial_records(local) == trial_records(remote)
    tuning_unit(boston, 0, config, budget, local)
    name = tuning.study_name("boston", 0, config, budget.seed)
    returned = tuning_unit(boston, 0, config, budget, None, stored_trials(remote, name))
    store_trials(remote, "boston", 0, config, budget, returned)
    records = trial_records(local)
    assert records == trial_records(remote)
    assert sum(state == optuna.trial.TrialState.COMPLETE for _, state, *_ in records) == 4


def test_the_budget_counts_candidates_not_abandoned_or_repeated_trials() -> None:
    distribution = {"prior_std": optuna.distributions.FloatDistribution(0.01, 10.0, log=True)}

    def trial(prior_std: float, state=optuna.trial.TrialState.COMPLETE, **attrs):
        value = 1.0 if state == optuna.trial.TrialState.COMPLETE else None
        return optuna.trial.create_trial(
            params={"prior_std": prior_std}, distributions=distribution, value=value,
            state=state, user_attrs=attrs,
        )  # fmt: skip

    fail = optuna.trial.TrialState.FAIL
    abandoned = trial(0.4, fail, abandoned=True)
    trials = [trial(0.1), trial(0.2), trial(0.1), trial(0.3, fail), abandoned]
    assert used_budget(trials) == 3  # 0.1 and 0.2 scored, 0.3 diverged


def test_study_names_tell_the_families_of_vi_apart() -> None:
    from vbnn.regression.methods import method_config
    from vbnn.regression.tuning import study_name

    names = {study_name("data", 0, method_config(family), 0) for family in ("vd-layer", "additive")}
    assert names == {"data/split0/vd-layer/hidden50/seed0", "data/split0/additive/hidden50/seed0"}
    deep = method_config("mf", hidden=(50, 50))
    assert study_name("data", 0, deep, 3) == "data/split0/mf/hidden50x50/seed3"
