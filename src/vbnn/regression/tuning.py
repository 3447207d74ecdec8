"""Hyper-parameter search by Bayesian optimisation (Optuna's TPE), candidates trained as a stack.

Trippe & Turner 2017 (experimental details) tuned with Spearmint on one split: the prior std of MAP,
MF, GD and FC, GD's posterior std, and ES's learning rate. It gives no SGLD settings at all; here
SGLD's step size eta is searched together with its prior std. Here:

- the objective is the log-likelihood of a *validation* part carved from a split's training rows
  (``TuningConfig.validation_fraction``, seeded), standardised with the remaining rows' statistics;
  no test row is ever seen;
- each round asks Optuna for ``batch`` candidates and trains them side by side as one model stack
  (prior and posterior std are per-model tensors); candidates share the split's streams, so they
  start from the same weights and see the same noise (common random numbers); SGLD's step size is
  per model too. ES's learning rate cannot differ inside one Adam, so ES candidates train one at
  a time;
- TPE with the constant liar keeps the candidates of one round apart;
- the study lives in Optuna storage (the results database's SQLite file), so a killed search
  resumes: trials already complete count towards the budget. Each score is stored as soon as
  its stack has trained; on the large sets a stack is one model, so a killed round keeps the
  candidates it finished, and the resumed search trains the rest of that round first
  (``studies``).

Protocols (``TuneProtocol``): ``once`` tunes on split 0's training data and shares the values with
every split (the paper's); ``per-split`` tunes each split on its own training data, so no test row
of one split can have steered the values used on another.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial

import numpy as np
import optuna
import torch

from vbnn.core.randomness import derive_seed
from vbnn.data.splits import StackedSplits, standardise
from vbnn.data.uci import RegressionDataset
from vbnn.regression.engine import choose_chunk_size, shared_settings, train_stack
from vbnn.regression.full_batch import NonFiniteLossError
from vbnn.regression.runs import PER_MODEL_SETTINGS, ModelValues, SearchSpace, TrainConfig
from vbnn.regression.studies import (
    WORKER,
    requeue_unfinished,
    sampler_seed,
    spent_budget,
    used_budget,
)


class TuneProtocol(str, Enum):
    ONCE = "once"
    PER_SPLIT = "per-split"


def hidden_label(hidden: Sequence[int]) -> str:
    """The hidden widths as studies, keys and tables name them: ``(50, 50)`` is ``50x50``."""
    return "x".join(str(width) for width in hidden)


def study_name(dataset: str, split: int, config: TrainConfig, seed: int) -> str:
    """The Optuna study of one (data set, split, method, architecture, seed) search, e.g.
    ``boston/split0/mf/hidden50/seed0``."""
    hidden = hidden_label(config.hidden)
    return f"{dataset}/split{split}/{config.method}/hidden{hidden}/seed{seed}"


@dataclass(frozen=True)
class TuningConfig:
    """Budget and protocol of a search.

    Attributes:
        trials: candidates evaluated per study (the budget).
        batch: candidates trained together in one stack (ES: 1 regardless).
        validation_fraction: share of the split's training rows held out as the objective.
        seed: seeds the validation carve and the sampler.
    """

    trials: int = 30
    batch: int = 10
    validation_fraction: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.trials < 1 or self.batch < 1 or not 0 < self.validation_fraction < 1:
            raise ValueError(f"TuningConfig: invalid {self}")


def tuning_rows(
    dataset: RegressionDataset, split: int, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (fit, validation) carved from split ``split``'s training rows only."""
    train, _ = dataset.split(split)
    order = np.random.default_rng(derive_seed(seed, split, "tuning")).permutation(train)
    held_out = max(1, round(fraction * len(order)))
    return order[held_out:], order[:held_out]


def tuning_problem(
    dataset: RegressionDataset, split: int, fraction: float, seed: int, dtype: torch.dtype
) -> StackedSplits:
    """Split ``split``'s training rows into fit and validation parts, standardised by the fit part.

    The returned stack holds one model whose "test" part is the validation rows.
    """
    fit_rows, validation_rows = tuning_rows(dataset, split, fraction, seed)
    x_fit, x_validation, _ = standardise(dataset.inputs[fit_rows], dataset.inputs[validation_rows])
    y_fit, y_validation, y_std = standardise(
        dataset.target[fit_rows], dataset.target[validation_rows]
    )

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=dtype).unsqueeze(0)

    return StackedSplits(
        split_ids=(split,),
        x_train=tensor(x_fit),
        y_train=tensor(y_fit),
        x_test=tensor(x_validation),
        y_test=tensor(y_validation),
        target_scale=torch.tensor([float(y_std)], dtype=dtype),
    )


def _repeat(data: StackedSplits, count: int) -> StackedSplits:
    def repeat(t: torch.Tensor) -> torch.Tensor:
        return t.expand(count, *t.shape[1:]).contiguous()

    return StackedSplits(
        split_ids=data.split_ids * count,
        x_train=repeat(data.x_train),
        y_train=repeat(data.y_train),
        x_test=repeat(data.x_test),
        y_test=repeat(data.y_test),
        target_scale=repeat(data.target_scale),
    )


def evaluate_candidates(
    config: TrainConfig,
    data: StackedSplits,
    candidates: list[dict[str, float]],
    on_score: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Validation log-likelihood of each candidate (NaN where training diverged).

    Candidates that differ only in ``PER_MODEL_SETTINGS`` train together, in stacks no larger than
    the engine's chunk size for this problem (a stack that leaves the cache is slower than two).

    Args:
        on_score: called with (index, score) as soon as a stack has trained, so a caller can keep
            each score before the next stack starts (a killed search loses one stack, not the
            round).
    """
    chunk = 1
    shared = shared_settings(candidates[0])
    if len(candidates) > 1 and all(shared_settings(c) == shared for c in candidates):
        rows, in_features = data.x_train.shape[1], data.x_train.shape[2]
        chunk = choose_chunk_size(config, rows, in_features, len(candidates))
    scores: list[float] = []
    for begin in range(0, len(candidates), chunk):
        for score in _evaluate_stack(config, data, candidates[begin : begin + chunk]):
            if on_score is not None:
                on_score(len(scores), score)
            scores.append(score)
    return scores


def _evaluate_stack(
    config: TrainConfig, data: StackedSplits, candidates: list[dict[str, float]]
) -> list[float]:
    """Scores of candidates that share all but ``PER_MODEL_SETTINGS``, trained as one stack.

    A stack whose loss diverges is trained again one candidate at a time, so that only the
    divergent candidates score NaN.
    """
    if len(candidates) > 1:
        base = dataclasses.replace(config, **shared_settings(candidates[0]))
        per_model = ModelValues(**{
            name: torch.tensor([c[name] for c in candidates], dtype=base.torch_dtype)
            for name in PER_MODEL_SETTINGS
            if name in candidates[0]
        })  # fmt: skip
        try:
            trained = train_stack(base, _repeat(data, len(candidates)), values=per_model)
            return [float(v) for v in trained.metrics.log_likelihood]
        except NonFiniteLossError:
            pass  # find the divergent candidate(s) one at a time
    scores = []
    for candidate in candidates:
        try:
            trained = train_stack(dataclasses.replace(config, **candidate), data)
            scores.append(float(trained.metrics.log_likelihood[0]))
        except NonFiniteLossError:
            scores.append(math.nan)
    return scores


def tune(
    dataset: RegressionDataset,
    split: int,
    config: TrainConfig,
    tuning: TuningConfig,
    storage: str | optuna.storages.BaseStorage | None = None,
    worker: int = 0,
    name: str | None = None,
    sole_writer: bool = True,
) -> dict[str, float]:
    """Search ``config.search_space()`` on split ``split``'s training data.

    Args:
        storage: Optuna storage (e.g. ``sqlite:///results.sqlite``); None keeps it in memory.
            Several processes share a study only through a storage made for it (a journal
            file, an RDB server), never one SQLite file.
        worker: which of the processes sharing the study this is; worker ``w`` seeds its
            sampler with the study's seed + ``w`` (worker 0: the study's own), so workers do not
            propose the same random start-up candidates.
        name: the study's name in ``storage`` (default: :func:`study_name`).
        sole_writer: True when no other process tunes this study meanwhile: a trial still
            running is then a killed process's, and the search completes it first
            (``studies.requeue_unfinished``). False when workers share the study: each tags
            the trials it asks with ``worker``, completes only its own running ones (left by
            its dead process) and, before each round, counts the others' running trials as
            spent (``studies.spent_budget``), so the workers together stop at
            ``tuning.trials`` (two that read the study at the same moment may each ask one
            round more).

    Returns:
        The best candidate's values, e.g. {"prior_std": 0.8}; a sharing worker that found the
        rest of the budget in others' hands before any trial was scored returns {}.
    """
    space = config.search_space()
    name = name or study_name(dataset.name, split, config, tuning.seed)
    study = _open_study(name, storage, tuning.seed, split, worker)
    done = used_budget(study.trials)
    if done >= tuning.trials:
        return dict(study.best_params)
    requeue_unfinished(study, tuning.trials, None if sole_writer else worker)
    data = tuning_problem(
        dataset, split, tuning.validation_fraction, tuning.seed, config.torch_dtype
    )
    # a round's candidates train as one stack only where all they vary may differ per model
    batch = tuning.batch if set(space) <= set(PER_MODEL_SETTINGS) else 1
    while True:
        if not sole_writer:  # the other workers' rounds count too
            done = spent_budget(study.trials)
        if done >= tuning.trials:
            break
        tagged = None if sole_writer else worker
        trials, candidates = _ask(study, space, min(batch, tuning.trials - done), tagged)
        evaluate_candidates(config, data, candidates, on_score=partial(_tell, study, trials))
        done += len(trials)
    if not sole_writer and not any(
        t.state == optuna.trial.TrialState.COMPLETE for t in study.trials
    ):
        return {}
    return dict(study.best_params)


def _open_study(
    name: str,
    storage: str | optuna.storages.BaseStorage | None,
    seed: int,
    split: int,
    worker: int,
) -> optuna.Study:
    """The study ``name`` in ``storage`` (created when new), its TPE sampler seeded for
    ``worker`` and the trials it already holds: each split's study proposes its own candidates
    (a seed of its own), a resumed search too."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=name, storage=storage, direction="maximize", load_if_exists=True
    )
    seed = sampler_seed(seed, split, worker, len(study.trials))
    study.sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    return study


def _ask(
    study: optuna.Study,
    space: SearchSpace,
    count: int,
    worker: int | None,
) -> tuple[list[optuna.Trial], list[dict[str, float]]]:
    """``count`` new trials of ``study`` (tagged with ``worker`` when workers share it) and
    their candidates, each value drawn log-uniformly from its (low, high) in ``space``."""
    trials = [study.ask() for _ in range(count)]
    if worker is not None:
        for trial in trials:
            trial.set_user_attr(WORKER, worker)
    candidates = [
        {name: t.suggest_float(name, low, high, log=True) for name, (low, high) in space.items()}
        for t in trials
    ]
    return trials, candidates


def _tell(study: optuna.Study, trials: list[optuna.Trial], index: int, score: float) -> None:
    """Store candidate ``index``'s score (a non-finite one as a failed trial)."""
    if math.isfinite(score):
        study.tell(trials[index], score)
    else:
        study.tell(trials[index], state=optuna.trial.TrialState.FAIL)
