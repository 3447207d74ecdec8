"""scikit-learn's own estimator checks on ``BayesianRegressor`` and ``BayesianClassifier``, and
the property behind two of them: a row's prediction does not depend on the other rows of X.

The checks fit many times, so the instances train briefly (20 full-batch steps; 2 epochs) and
predict with 10 weight draws; what is checked is the API, not the quality of the fit (that is
``test_the_regressor_predicts_the_checks_data_with_r2_above_one_half`` below, and the
estimators' own test files)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_regression
from sklearn.metrics import r2_score
from sklearn.preprocessing import scale
from sklearn.utils.estimator_checks import parametrize_with_checks

from vbnn.classification.estimator import BayesianClassifier
from vbnn.regression.estimator import BayesianRegressor

QUICK = [
    BayesianRegressor(iterations=20, samples=10),
    BayesianRegressor(iterations=20, samples=10, heteroscedastic=True),
    BayesianClassifier(epochs=2, samples=10),
]


@parametrize_with_checks(QUICK)
def test_scikit_learn_estimator_checks(estimator, check) -> None:
    check(estimator)


def rows(n: int, features: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, features))


@pytest.fixture(scope="module")
def regressor() -> tuple[BayesianRegressor, np.ndarray]:
    x = rows(60, 2, 0)
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rows(60, 1, 1)[:, 0]
    return BayesianRegressor(hidden=(16,), iterations=200, samples=50, seed=3).fit(x, y), x


def test_a_rows_regression_prediction_does_not_depend_on_the_other_rows(regressor) -> None:
    """Each of the K draws is one network applied to every row: one row alone, the rows
    reversed and a subset give the same mean, total std and parts as the whole batch (to
    float64 rounding; the per-row LRT draws differed by about the epistemic std / sqrt(K))."""
    model, x = regressor
    mean, std = model.predict(x, return_std=True)
    parts = model.predict_components(x)
    alone = model.predict(x[:1], return_std=True)
    np.testing.assert_allclose(np.concatenate(alone), [mean[0], std[0]], rtol=1e-12)
    reversed_parts = model.predict_components(x[::-1])
    for part, reversed_part in zip(parts, reversed_parts, strict=True):
        np.testing.assert_allclose(reversed_part[::-1], part, rtol=1e-12)
    subset = model.predict(x[10:17], return_std=True)
    np.testing.assert_allclose(np.stack(subset), np.stack([mean[10:17], std[10:17]]), rtol=1e-12)
    assert np.all(parts[1] > 0)  # the draws do differ: the equalities are not those of a point


def test_the_predictive_mean_of_a_linear_model_is_linear_in_x() -> None:
    """hidden=(): every draw f_k(x) = a_k x + b_k is a line, so the mean over the K draws is a
    line too when the draws are shared by the rows: its second difference on an even grid is 0
    to rounding. Per-row draws (the LRT) would leave Monte Carlo noise of order epistemic std /
    sqrt(K) in it."""
    x = np.linspace(-1, 1, 40).reshape(-1, 1)
    y = 3 * x[:, 0] + 0.3 * np.random.default_rng(0).normal(size=40)
    model = BayesianRegressor(hidden=(), iterations=100, samples=8).fit(x, y)
    grid = np.linspace(-3, 3, 7).reshape(-1, 1)
    mean, epistemic, _ = model.predict_components(grid)
    assert np.abs(np.diff(mean, 2)).max() < 1e-9 * np.abs(mean).max()
    assert epistemic.min() > 1e-3  # the K lines differ


def test_a_rows_class_probabilities_do_not_depend_on_the_other_rows() -> None:
    x = rows(80, 3, 2)
    labels = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 1)
    model = BayesianClassifier(hidden=(8,), epochs=5, samples=20, seed=1).fit(x, labels)
    whole = model.predict_proba(x)
    np.testing.assert_allclose(model.predict_proba(x[5:6]), whole[5:6], rtol=1e-6)
    np.testing.assert_allclose(model.predict_proba(x[::-1])[::-1], whole, rtol=1e-6)
    np.testing.assert_array_equal(model.predict(x[20:40]), model.predict(x)[20:40])


def test_the_regressor_predicts_the_checks_data_with_r2_above_one_half() -> None:
    """``check_regressors_train`` asks for ``score`` above 0.5, an R^2 bar; ``score`` here is a
    log-likelihood (at most about -0.6 nats on that data: least squares leaves a residual std
    of 0.44), so the regressor's tag says ``poor_score`` and the R^2 of its predictions is
    checked here instead."""
    x, y = make_regression(200, 10, n_informative=1, bias=5.0, noise=20, random_state=42)
    x, y = scale(x), scale(y)  # the data of the check
    model = BayesianRegressor(iterations=300, samples=20).fit(x, y)
    assert r2_score(y, model.predict(x)) > 0.5
