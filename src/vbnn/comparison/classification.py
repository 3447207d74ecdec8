"""Classification folds: the folds of one family train as one batched stack of MLPs.

Model m of a stack is fold ``fold_ids[m]``'s network: it sees only that fold's training rows,
standardised by their own mean and std, and draws its initialisation, minibatches, training
noise and predictive samples from its own streams (``ModelGenerators`` keyed by the fold id). Each
epoch every model shuffles its own rows and takes its own minibatch of B at each step; the loss
is

    sum_m -ELBO_m / N,    ELBO_m = N / B sum_{n in batch_m} log p(t_n | x_n, W_m) - KL(q_m || p),

(Neklyudov et al. 2019 eq. 5; ``training.objectives.elbo`` over (M, B, C) logits), minimised by
one Adam (``vbnn.train`` on the folds' ``StackedBatches``): the models are independent in every
element, so a fold trains exactly as it would in a stack of one (up to float rounding). Folds
of one stack must share their sizes (N training and T test rows); stratified K folds of N rows
have at most two sizes, so a family trains as at most two stacks.

Tuning (Optuna TPE, in memory, on validation rows carved class by class from the fold's training
rows) trains each candidate as a stack of one on the fit rows. The chosen learning rates differ
between folds and one Adam cannot vary its step size per model, so tuned folds train one at a
time (a per-model prior std alone would stack: ``GaussianPrior`` takes an (M,) std). The driver
stores every stack's rows together, so a killed comparison resumes stack by stack (a search cut
short runs again).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import optuna
import torch

from vbnn.comparison.config import CompareConfig
from vbnn.comparison.folds import Split
from vbnn.comparison.scores import classification_scores
from vbnn.core.contracts import ForwardMode, SplitResult
from vbnn.core.randomness import ModelGenerators, derive_seed
from vbnn.data.splits import standardise
from vbnn.layers.registry import family
from vbnn.networks.mlp import MLP
from vbnn.networks.predictive import predictive_probabilities, sample
from vbnn.priors.gaussian import GaussianPrior
from vbnn.training.batches import StackedBatches
from vbnn.training.likelihoods import CategoricalLikelihood
from vbnn.training.trainer import train

SEARCH_SPACE = {"learning_rate": (1e-3, 0.1), "prior_std": (0.01, 10.0)}
ACTIVATION = "tanh"


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


@dataclass(frozen=True)
class StackedFolds:
    """Folds of equal sizes on the model dimension: inputs (M, N, I) and (M, T, I), each fold
    standardised by its own training rows; labels (M, N) and (M, T), classes 0 .. C-1."""

    fold_ids: tuple[int, ...]
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int


def stack_folds(
    inputs: np.ndarray, labels: np.ndarray, splits: Sequence[Split], fold_ids: Sequence[int]
) -> StackedFolds:
    """Stack the folds ``splits`` (one per id of ``fold_ids``).

    Raises:
        ValueError: the folds differ in training or test size.
    """
    sizes = {(len(train), len(test)) for train, test in splits}
    if len(sizes) != 1:
        raise ValueError(
            f"folds {list(fold_ids)} differ in size {sorted(sizes)}: stack equal sizes"
        )
    parts = [standardise(inputs[train], inputs[test])[:2] for train, test in splits]

    def stack(arrays: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.stack(arrays), dtype=dtype)

    return StackedFolds(
        fold_ids=tuple(fold_ids),
        x_train=stack([p[0] for p in parts], torch.float32),
        y_train=stack([labels[train] for train, _ in splits], torch.int64),
        x_test=stack([p[1] for p in parts], torch.float32),
        y_test=stack([labels[test] for _, test in splits], torch.int64),
        classes=int(labels.max()) + 1,
    )


def train_stack(
    data: StackedFolds, run: ClassifierRun, prior_std: torch.Tensor | None = None
) -> torch.Tensor:
    """Train one model per fold of ``data`` (module docstring); the predictive
    p(y = c | x) = (1/K) sum_k softmax(f_k(x))_c of every test row, (M, T, C) float64, with K =
    ``run.samples`` weight samples.

    Args:
        prior_std: (M,) each model's Gaussian prior std; None: ``run.prior_std`` for every model
            (None there too: each family's own prior).
    """
    keys = list(data.fold_ids)
    features = data.x_train.shape[-1]
    sizes = (features, *run.hidden, data.classes)
    model = MLP(run.method, sizes, ACTIVATION, ModelGenerators.for_keys(run.seed, keys, "init"))
    if prior_std is None and run.prior_std is not None:
        prior_std = torch.full((len(keys),), float(run.prior_std))
    prior = None if prior_std is None else GaussianPrior(prior_std)
    streams = ModelGenerators.for_keys(run.seed, keys, "train")  # shuffling and noise
    batches = StackedBatches(data.x_train, data.y_train, run.batch_size, streams)
    train(
        model,
        batches,
        likelihood=CategoricalLikelihood(),
        prior=prior,
        epochs=run.epochs,
        batch_size=run.batch_size,
        learning_rate=run.learning_rate,
        seed=run.seed,
        progress=False,
        noise=streams,
    )
    noise = ModelGenerators.for_keys(run.seed, keys, "eval")
    logits = sample(model, data.x_test, run.samples, ForwardMode.WEIGHTS, noise=noise)
    return predictive_probabilities(logits)


def fold_metrics(probabilities: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Every metric of the table (``comparison.scores``) of one fold's predictive probabilities
    (T, C) and labels (T,); the log-likelihood stored as ``test_log_likelihood``."""
    scores = classification_scores(probabilities, labels)
    return {"test_log_likelihood": scores.pop("log_likelihood"), **scores}


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
    """The best values of ``run.trials`` candidates by validation log-likelihood (nats); each
    candidate is a stack of one with the fold's streams (common random numbers)."""
    fit, held_out = validation_rows(labels, train, run.validation_fraction, run.seed, fold)
    if held_out.size == 0:
        raise ValueError(
            f"fold {fold}: validation_fraction={run.validation_fraction} holds out no row of "
            f"its {train.size} training rows; raise it or pass tune=False"
        )
    # a family under the Gaussian N(0, s^2) prior (FamilySpec.gaussian_prior) has s searched too;
    # the others keep their own prior (variational dropout's log-uniform, ...)
    names = ["learning_rate"] + (["prior_std"] if family(run.method).gaussian_prior else [])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=derive_seed(run.seed, fold, "tuning") % 2**32)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    data = stack_folds(inputs, labels, [(fit, held_out)], [fold])

    def objective(trial: optuna.Trial) -> float:
        values = {n: trial.suggest_float(n, *SEARCH_SPACE[n], log=True) for n in names}
        probabilities = train_stack(data, replace(run, **values))[0]
        score = fold_metrics(probabilities, data.y_test[0])["test_log_likelihood"]
        return score if math.isfinite(score) else -math.inf

    study.optimize(objective, n_trials=run.trials)
    return dict(study.best_params)


def classification_stack(
    inputs: np.ndarray,
    labels: np.ndarray,
    splits: Sequence[Split],
    run: ClassifierRun,
    fold_ids: Sequence[int],
) -> tuple[list[SplitResult], dict[int, dict[str, Any]]]:
    """Tune each fold (when ``run.trials``), train the folds as one stack, score the test rows.

    Args:
        labels: (N,) integer classes 0 .. C-1; every class in every fold's training rows.
        splits: one (training rows, test rows) per id of ``fold_ids``, all of equal sizes.

    Returns:
        (each fold's ``SplitResult``: test log-likelihood in nats per row, RMSE NaN, training
        seconds a model; each fold's metrics: test_log_likelihood, accuracy, ece (15 bins),
        brier, the chosen values and the search's seconds).

    Raises:
        ValueError: tuned folds whose chosen learning rates differ (train those one at a time).
    """
    values, tuning_seconds, prior_std = [{} for _ in fold_ids], [0.0] * len(fold_ids), None
    if run.trials:
        for m, ((train, _), fold) in enumerate(zip(splits, fold_ids, strict=True)):
            start = time.perf_counter()
            values[m] = tune_classifier(inputs, labels, train, run, fold)
            tuning_seconds[m] = time.perf_counter() - start
        if len({v["learning_rate"] for v in values}) > 1:
            raise ValueError(
                f"folds {list(fold_ids)}: tuned learning rates differ; one Adam cannot vary "
                "them per model, so train these folds one at a time"
            )
        run = replace(run, learning_rate=values[0]["learning_rate"])
        if "prior_std" in values[0]:
            prior_std = torch.tensor([v["prior_std"] for v in values])
    start = time.perf_counter()
    data = stack_folds(inputs, labels, splits, fold_ids)
    probabilities = train_stack(data, run, prior_std)
    seconds = (time.perf_counter() - start) / len(fold_ids)
    results, metrics = [], {}
    for m, fold in enumerate(fold_ids):
        scores = fold_metrics(probabilities[m], data.y_test[m])
        results.append(
            SplitResult(
                split=fold,
                test_log_likelihood=scores["test_log_likelihood"],
                test_rmse=math.nan,
                train_seconds=seconds,
            )
        )
        metrics[fold] = {**scores, "values": values[m], "tuning_seconds": tuning_seconds[m]}
    return results, metrics
