"""Optuna studies that a killed search left behind: what counts towards the budget, what runs again.

A search stores a trial as RUNNING when it asks for a candidate, and as COMPLETE (FAIL where
training diverged) once the candidate is scored. A process killed in a round leaves that round's
unscored candidates RUNNING for good. Left so, they harm the resumed search twice: TPE's
constant liar counts every running trial as the worst score, so the search steers away from the
candidates it had just chosen; and a sampler seeded as before draws its earlier candidates again
(protein's MF study trained five start-up candidates twice this way, about 7 min each).

When one process owns the study, :func:`requeue_unfinished` marks its running trials failed
with the user attribute ``abandoned`` (TPE ignores failed trials; the budget does not count
them) and queues their candidates to be asked first, so the resumed search completes the killed
round. :func:`sampler_seed` gives a resumed search a seed of its own; a new study keeps the
study's seed, so an uninterrupted search proposes what it always did. :func:`used_budget`
counts a candidate scored twice once, so a study that replayed candidates before this module
still gets its budget of different ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import optuna

from vbnn.core.randomness import derive_seed

ABANDONED = "abandoned"
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
RUNNING = optuna.trial.TrialState.RUNNING
WAITING = optuna.trial.TrialState.WAITING


def is_abandoned(trial: optuna.trial.FrozenTrial) -> bool:
    return bool(trial.user_attrs.get(ABANDONED, False))


def used_budget(trials: Sequence[optuna.trial.FrozenTrial]) -> int:
    """Candidates that count towards a search's budget: each one scored (once, though a replay
    before this module may have scored it twice) or diverged, none abandoned."""
    scored = {
        tuple(sorted(t.params.items()))
        for t in trials
        if t.state == optuna.trial.TrialState.COMPLETE
    }
    failed = sum(t.state == optuna.trial.TrialState.FAIL and not is_abandoned(t) for t in trials)
    return len(scored) + failed


def sampler_seed(seed: int, split: int, worker: int, trials_before: int) -> int:
    """The TPE seed of a search that starts on a study already holding ``trials_before`` trials.

    A new study: the study's seed, (seed, split)'s tuning stream + ``worker``. A resumed one: a
    seed drawn from that and ``trials_before``, so it does not replay the killed process's draws.
    """
    base = (derive_seed(seed, split, "tuning") + worker) % 2**32
    if trials_before == 0:
        return base
    return int(np.random.SeedSequence([base, trials_before]).generate_state(1)[0])


def abandon(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Mark a running trial of ``study`` as abandoned (failed, not counted in the budget)."""
    optuna.Trial(study, trial._trial_id).set_user_attr(ABANDONED, True)
    study.tell(trial.number, state=optuna.trial.TrialState.FAIL)


def requeue_unfinished(study: optuna.Study, budget: int) -> list[dict[str, float]]:
    """Abandon ``study``'s running trials and queue their candidates to be asked first.

    Only for a study this process alone tunes: there, a running trial belongs to a killed process.
    Newest first, a candidate is queued while the budget has room for it (beside the trials that
    count and those already queued) and unless it is already scored or queued.

    Returns:
        The queued candidates, in the order they will be asked (the order they were first asked).
    """
    trials = study.trials
    room = budget - used_budget(trials) - sum(t.state == WAITING for t in trials)
    known = [t.params for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, WAITING)]
    chosen: list[optuna.trial.FrozenTrial] = []
    for trial in sorted((t for t in trials if t.state == RUNNING), key=lambda t: -t.number):
        abandon(study, trial)
        seen = known + [t.params for t in chosen]
        if len(chosen) < room and trial.params and trial.params not in seen:
            chosen.append(trial)
    queued = [t.params for t in sorted(chosen, key=lambda t: t.number)]
    for params in queued:
        study.enqueue_trial(params)
    return queued


def finish_queued(study: optuna.Study, finished: optuna.trial.FrozenTrial) -> None:
    """Finish ``study``'s oldest queued trial as ``finished`` (its copy, scored elsewhere)."""
    trial = study.ask()
    if trial.number != finished.number:
        raise ValueError(
            f"study {study.study_name!r}: its oldest queued trial is #{trial.number}, but the "
            f"finished copy is #{finished.number}; the two studies have parted"
        )
    for name, distribution in finished.distributions.items():
        if not isinstance(distribution, optuna.distributions.FloatDistribution):
            raise TypeError(f"finish_queued: {name} is not a float parameter ({distribution})")
        trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)
    if finished.state == optuna.trial.TrialState.COMPLETE:
        study.tell(trial, finished.value)
    else:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
