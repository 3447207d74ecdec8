"""Classification folds: one ``BayesianClassifier`` per (family, fold), tuned on its own fold.

There is no stacked classification trainer, so the folds of a family train one after another
(or side by side as separate units on the ``processes`` and ``ray`` executors), not as one
batched stack as in regression. A unit (:func:`classification_fold`) tunes when asked (Optuna
TPE, in memory, on validation rows carved class by class from the fold's training rows), fits on
the whole training fold with the chosen values and returns the test metrics; the driver stores
each unit's row, so a killed comparison resumes unit by unit (a search cut short runs again).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import optuna
import torch

from vbnn.classification.estimator import BayesianClassifier
from vbnn.comparison.config import CompareConfig
from vbnn.core.contracts import SplitResult
from vbnn.core.randomness import derive_seed
from vbnn.metrics import accuracy, brier_score, expected_calibration_error

# Families whose prior is the Gaussian N(0, s^2) that ``prior_std`` sets; the others keep their
# own prior (variational dropout's log-uniform, ...) and only the learning rate is searched.
GAUSSIAN_PRIOR_FAMILIES = ("mf", "gd", "fc", "fc-low-rank")
SEARCH_SPACE = {"learning_rate": (1e-3, 0.1), "prior_std": (0.01, 10.0)}
ECE_BINS = 15


@dataclass(frozen=True)
class ClassifierRun:
    """One family's classifier settings, stored with its results (``method`` is the family)."""

    method: str
    hidden: tuple[int, ...]
    epochs: int
    batch_size: int
    learning_rate: float
    samples: int
    seed: int
    prior_std: float | None = None
    trials: int = 0  # 0: no search
    validation_fraction: float = 0.2


def classifier_run(name: str, config: CompareConfig) -> ClassifierRun:
    return ClassifierRun(
        method=name,
        hidden=config.hidden,
        epochs=config.epochs,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        samples=config.test_samples,
        seed=config.seed,
        trials=config.trials if config.tune else 0,
        validation_fraction=config.validation_fraction,
    )


def _classifier(run: ClassifierRun) -> BayesianClassifier:
    return BayesianClassifier(
        family=run.method,
        hidden=run.hidden,
        epochs=run.epochs,
        batch_size=run.batch_size,
        learning_rate=run.learning_rate,
        prior_std=run.prior_std,
        samples=run.samples,
        seed=run.seed,
    )


def validation_rows(
    labels: np.ndarray, train: np.ndarray, fraction: float, seed: int, fold: int
) -> tuple[np.ndarray, np.ndarray]:
    """(fit rows, validation rows) of a training fold: ``floor(fraction * n_c)`` rows of each
    class c held out (seeded), so the fit rows keep every class."""
    generator = np.random.default_rng(derive_seed(seed, fold, "tuning"))
    fit, held_out = [], []
    for c in np.unique(labels[train]):
        rows = generator.permutation(train[labels[train] == c])
        count = math.floor(fraction * len(rows))
        held_out.append(rows[:count])
        fit.append(rows[count:])
    return np.sort(np.concatenate(fit)), np.sort(np.concatenate(held_out))


def tune_classifier(
    inputs: np.ndarray, labels: np.ndarray, train: np.ndarray, run: ClassifierRun, fold: int
) -> dict[str, float]:
    """The best values of ``run.trials`` candidates by validation log-likelihood (nats)."""
    fit, held_out = validation_rows(labels, train, run.validation_fraction, run.seed, fold)
    if held_out.size == 0:
        raise ValueError(
            f"fold {fold}: validation_fraction={run.validation_fraction} holds out no row of "
            f"its {train.size} training rows; raise it or pass tune=False"
        )
    names = ["learning_rate"] + (["prior_std"] if run.method in GAUSSIAN_PRIOR_FAMILIES else [])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=derive_seed(run.seed, fold, "tuning") % 2**32)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        values = {n: trial.suggest_float(n, *SEARCH_SPACE[n], log=True) for n in names}
        model = _classifier(replace(run, **values)).fit(inputs[fit], labels[fit])
        score = model.score(inputs[held_out], labels[held_out])
        return score if math.isfinite(score) else -math.inf

    study.optimize(objective, n_trials=run.trials)
    return dict(study.best_params)


def classification_fold(
    inputs: np.ndarray,
    labels: np.ndarray,
    split: tuple[np.ndarray, np.ndarray],
    run: ClassifierRun,
    fold: int,
) -> tuple[SplitResult, dict[str, Any]]:
    """Tune (when ``run.trials``), fit on the training rows, score the test rows.

    Args:
        labels: (N,) integer classes 0 .. C-1; every class in the training rows.

    Returns:
        (the fold's ``SplitResult``: test log-likelihood in nats per row, RMSE NaN; metrics
        accuracy, ece (15 bins), brier, the chosen values and the search's seconds).
    """
    train, test = split
    start = time.perf_counter()
    values = tune_classifier(inputs, labels, train, run, fold) if run.trials else {}
    tuning_seconds = time.perf_counter() - start
    start = time.perf_counter()
    model = _classifier(replace(run, **values)).fit(inputs[train], labels[train])
    probabilities = torch.as_tensor(model.predict_proba(inputs[test]), dtype=torch.float64)
    seconds = time.perf_counter() - start
    target = torch.as_tensor(labels[test], dtype=torch.int64)
    picked = probabilities[torch.arange(len(target)), target].clamp_min(1e-300)
    result = SplitResult(
        split=fold,
        test_log_likelihood=float(picked.log().mean()),
        test_rmse=math.nan,
        train_seconds=seconds,
    )
    metrics = {
        "accuracy": float(accuracy(probabilities, target)),
        "ece": float(expected_calibration_error(probabilities, target, ECE_BINS)),
        "brier": float(brier_score(probabilities, target)),
        "values": values,
        "tuning_seconds": tuning_seconds,
    }
    return result, metrics
