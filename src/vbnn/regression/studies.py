"""Optuna studies that a killed search left behind: what counts towards the budget, what runs again.

A search stores a trial as RUNNING when it asks for a candidate, and as COMPLETE (FAIL where
training diverged) once the candidate is scored. A process killed in a round leaves that round's
unscored candidates RUNNING for good. Left so, they harm the resumed search twice: TPE's
constant liar counts every running trial as the worst score, so the search steers away from the
candidates it had just chosen; and a sampler seeded as in the killed run draws its earlier
candidates again, each trained a second time (observed: reproductions/overpruning/README.md,
"Killed rounds").

When one process owns the study, :func:`requeue_unfinished` marks its running trials failed
with the user attribute ``abandoned`` (TPE ignores failed trials; the budget does not count
them) and queues their candidates to be asked first, so the resumed search completes the killed
round.

When workers share the study (``vbnn sweep`` with ``workers > 1``), another worker's running
trial is live. Each worker tags the trials it asks with its index (user attribute ``worker``), so
a worker that the executor runs again after its process died requeues only its own
(``requeue_unfinished(..., worker=w)``), and :func:`spent_budget` counts the others' running
trials as spent, so concurrent workers together stop at the budget.

:func:`sampler_seed` gives a resumed search a seed of its own; a new study keeps the study's
seed, so an uninterrupted search's candidates depend on that seed alone. :func:`used_budget`
counts a candidate scored twice once, so a stored study that replayed candidates still gets its
budget of different ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import optuna

from vbnn.core.randomness import derive_seed

ABANDONED = "abandoned"
WORKER = "worker"  # user attribute: the index of the sharing worker that asked the trial
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
RUNNING = optuna.trial.TrialState.RUNNING
WAITING = optuna.trial.TrialState.WAITING


def is_abandoned(trial: optuna.trial.FrozenTrial) -> bool:
    return bool(trial.user_attrs.get(ABANDONED, False))


def used_budget(trials: Sequence[optuna.trial.FrozenTrial]) -> int:
    """Candidates that count towards a search's budget: each one scored (once, though a stored
    study that replayed candidates may hold it scored twice) or diverged, none abandoned."""
    scored = {
        tuple(sorted(t.params.items()))
        for t in trials
        if t.state == optuna.trial.TrialState.COMPLETE
    }
    failed = sum(t.state == optuna.trial.TrialState.FAIL and not is_abandoned(t) for t in trials)
    return len(scored) + failed


def spent_budget(trials: Sequence[optuna.trial.FrozenTrial]) -> int:
    """A shared study's budget spent or being spent: :func:`used_budget` plus the trials live
    workers are scoring now (running)."""
    return used_budget(trials) + sum(t.state == RUNNING for t in trials)


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


def requeue_unfinished(
    study: optuna.Study, budget: int, worker: int | None = None
) -> list[dict[str, float]]:
    """Abandon ``study``'s running trials and queue their candidates to be asked first.

    Only for running trials of a dead process: every running trial where this process alone
    tunes the study (``worker`` None), or those tagged with ``worker`` where workers share it
    (the executor runs a worker again only once its process died). Newest first, a candidate is
    queued while the budget has room for it (beside the trials that count, those already queued
    and the other workers' running ones) and unless it is already scored or queued.

    Returns:
        The queued candidates, in the order they will be asked (the order they were first asked).
    """
    trials = study.trials
    running = [t for t in trials if t.state == RUNNING]
    dead = [t for t in running if worker is None or t.user_attrs.get(WORKER) == worker]
    live = len(running) - len(dead)
    room = budget - used_budget(trials) - sum(t.state == WAITING for t in trials) - live
    known = [t.params for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, WAITING)]
    chosen: list[optuna.trial.FrozenTrial] = []
    for trial in sorted(dead, key=lambda t: -t.number):
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
