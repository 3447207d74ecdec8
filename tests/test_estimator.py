"""vbnn.BayesianRegressor: scikit-learn's estimator API around the engine's training."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import cross_val_score

import vbnn
from vbnn.core.defaults import ESTIMATOR_INIT_STD


def linear_data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(n, 1)) * 3.0 + 10.0  # raw units: the scalers must undo this
    return x, 2.0 * x[:, 0] - 5.0 + 0.3 * rng.normal(size=n)


def test_linear_mean_field_recovers_least_squares_and_the_noise_std() -> None:
    """hidden=() is Bayesian linear regression: with N = 400 and a N(0, 1) prior on the
    standardised weights the posterior mean is the least-squares line to within its posterior
    std, and the learned noise std is the residual std of that line."""
    x, y = linear_data()
    model = vbnn.BayesianRegressor(hidden=(), iterations=3000, learning_rate=0.01).fit(x, y)
    grid = np.linspace(4.0, 16.0, 7).reshape(-1, 1)
    mean, epistemic, aleatoric = model.predict_components(grid)
    design = np.column_stack([x[:, 0], np.ones(len(x))])
    slope, intercept = np.linalg.lstsq(design, y, rcond=None)[0]
    residual_std = np.std(y - design @ [slope, intercept])
    assert np.all(np.abs(mean - (slope * grid[:, 0] + intercept)) < 4 * epistemic + 0.02)
    assert abs(aleatoric[0] / residual_std - 1) < 0.1
    assert np.all(epistemic < 0.2 * aleatoric)  # 400 points: little parameter uncertainty
    _, total = model.predict(grid, return_std=True)
    np.testing.assert_allclose(total, np.sqrt(epistemic**2 + aleatoric**2))
    assert model.score(x, y) == pytest.approx(-np.log(residual_std * np.sqrt(2 * np.pi)) - 0.5,
                                              abs=0.05)  # fmt: skip


def test_estimator_works_with_clone_and_cross_val_score_and_round_trips(tmp_path) -> None:
    x, y = linear_data(120, seed=1)
    estimator = vbnn.BayesianRegressor(family="vd-layer", hidden=(8,), iterations=150)
    assert clone(estimator).get_params() == estimator.get_params()
    scores = cross_val_score(estimator, x, y, cv=2)
    assert scores.shape == (2,) and np.all(np.isfinite(scores))
    fitted = estimator.fit(x, y)
    loaded = vbnn.BayesianRegressor.load(fitted.save(tmp_path / "model"))
    np.testing.assert_array_equal(loaded.predict(x[:5]), fitted.predict(x[:5]))
    assert loaded.get_params() == fitted.get_params()


def test_bad_input_is_named() -> None:
    x, y = linear_data(20)
    estimator = vbnn.BayesianRegressor(iterations=5)
    with pytest.raises(NotFittedError, match="BayesianRegressor instance is not fitted yet"):
        estimator.predict(x)
    with pytest.raises(ValueError, match=r"(?s)Expected 2D array, got 1D array.*single feature"):
        estimator.fit(x[:, 0], y)
    with pytest.raises(ValueError, match=r"y must be 1-D with 20 values .* got shape \(19,\)"):
        estimator.fit(x, y[:19])
    bad = x.copy()
    bad[7, 0] = np.nan
    with pytest.raises(ValueError, match="X has NaN or inf in row 7"):
        estimator.fit(bad, y)
    estimator.fit(x, y)
    with pytest.raises(ValueError, match="X has 2 features, but BayesianRegressor is expecting 1"):
        estimator.predict(np.hstack([x, x]))
    with pytest.raises(ValueError, match="unknown family 'gauss'"):
        vbnn.BayesianRegressor(family="gauss").fit(x, y)
    with pytest.raises(ValueError, match=r"y is constant \(all 20 values are 2.5\)"):
        estimator.fit(x, np.full(20, 2.5))


@pytest.mark.parametrize(
    "estimator", [vbnn.BayesianRegressor(iterations=5), vbnn.BayesianClassifier(epochs=1)]
)
def test_both_estimators_refuse_to_fit_one_row(estimator) -> None:
    with pytest.raises(ValueError, match=r"X has 1 sample; fitting needs at least 2"):
        estimator.fit(np.array([[0.5, 1.0]]), np.array([1]))
    estimator.fit(np.array([[0.5, 1.0], [1.5, 0.0]]), np.array([1, 0]))  # two rows fit
    assert estimator.predict(np.array([[0.5, 1.0]])).shape == (1,)  # one row predicts


@pytest.fixture(scope="module")
def default_fit() -> vbnn.BayesianRegressor:
    """The defaults on 200 noisy points of a smooth function on [-1, 1]."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(200, 1))
    y = np.sin(3 * x[:, 0]) + 0.1 * rng.normal(size=200)
    return vbnn.BayesianRegressor(seed=0).fit(x, y)


def test_with_the_defaults_the_epistemic_std_grows_away_from_the_data(default_fit) -> None:
    """x = 4 is three data-widths outside [-1, 1]: the weight uncertainty must show there. With
    ReLU the network's output is linear in x far out, so its std grows in proportion to |x|;
    a saturating tanh flattens every sampled function and the std hardly changes (about 1.3x)."""
    _, epistemic, _ = default_fit.predict_components(np.array([[0.0], [4.0]]))
    assert epistemic[1] > 3 * epistemic[0]


def test_with_the_defaults_the_posterior_std_moves_from_its_initial_value(default_fit) -> None:
    """The ELBO sets the marginal stds within the default training: the median weight std ends
    at least ten times its initial value (the KL to N(0, 1) pulls an unconstrained weight's std
    towards 1, the likelihood holds a constrained one down)."""
    stds = np.concatenate(
        [p.detach().exp().numpy().ravel()
         for name, p in default_fit.model_.named_parameters() if name.endswith("log_std")]
    )  # fmt: skip
    initial = ESTIMATOR_INIT_STD
    assert default_fit.config_.posterior_std == initial
    assert np.median(stds) > 10 * initial
