"""``BayesianClassifier``: scikit-learn's classifier API, uncertainty away from the data, the
logistic-regression limit, save/load."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

from vbnn.classification.estimator import BayesianClassifier


def blobs(count: int, seed: int, spread: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Three classes around (-2, 0), (2, 0) and (0, 2.5), labelled "a", "b", "c"."""
    rng = np.random.default_rng(seed)
    centres = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, 2.5]])
    labels = rng.integers(0, 3, count)
    return centres[labels] + spread * rng.standard_normal((count, 2)), np.array(list("abc"))[labels]


def test_fit_predict_and_probabilities_on_three_blobs() -> None:
    x, y = blobs(300, 0)
    model = BayesianClassifier(hidden=(16,), epochs=60, seed=0).fit(x, y)
    test_x, test_y = blobs(200, 1)
    assert list(model.classes_) == ["a", "b", "c"]
    probabilities = model.predict_proba(test_x)
    assert probabilities.shape == (200, 3)
    np.testing.assert_allclose(probabilities.sum(1), 1.0, rtol=1e-9)
    assert (model.predict(test_x) == test_y).mean() > 0.95
    assert model.score(test_x, test_y) > -0.2  # mean log-likelihood in nats


def test_far_from_the_data_the_predictive_is_less_certain() -> None:
    x, y = blobs(300, 0)
    model = BayesianClassifier(hidden=(16,), epochs=60, seed=0).fit(x, y)
    angles = np.linspace(0, 2 * np.pi, 50, endpoint=False)
    far = 12 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    near = model.predict_uncertainty(blobs(200, 2)[0])
    away = model.predict_uncertainty(far)
    assert away["total"].mean() > near["total"].mean()
    assert away["epistemic"].mean() > near["epistemic"].mean()
    for part in (near, away):  # total = aleatoric + epistemic
        np.testing.assert_allclose(part["total"], part["aleatoric"] + part["epistemic"], atol=1e-9)


def test_without_hidden_layers_it_decides_as_a_logistic_regression() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((400, 2))
    direction = np.array([1.0, -2.0])
    margin = x @ direction
    keep = np.abs(margin) > 0.5  # linearly separable with a gap
    x, y = x[keep], (margin[keep] > 0).astype(int)
    bayes = BayesianClassifier(hidden=(), epochs=100, seed=0).fit(x, y)
    logistic = LogisticRegression(C=100.0).fit(x, y)
    test = rng.standard_normal((500, 2))
    test = test[np.abs(test @ direction) > 0.5]
    assert (bayes.predict(test) == logistic.predict(test)).mean() > 0.99


def test_clone_cross_val_score_and_the_same_seed_give_the_same_numbers() -> None:
    x, y = blobs(150, 4)
    model = BayesianClassifier(hidden=(8,), epochs=20, seed=1)
    copy = clone(model)
    assert copy.get_params() == model.get_params() and not hasattr(copy, "model_")
    scores = cross_val_score(model, x, y, cv=3)
    assert scores.shape == (3,) and np.all(scores < 0) and np.all(np.isfinite(scores))
    first = clone(model).fit(x, y).predict_proba(x[:20])
    second = clone(model).fit(x, y).predict_proba(x[:20])
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("family", ["gd", "vd-layer", "point"])
def test_other_families_fit(family: str) -> None:
    x, y = blobs(120, 5)
    model = BayesianClassifier(family=family, hidden=(8,), epochs=30, seed=0).fit(x, y)
    assert (model.predict(x) == y).mean() > 0.9


def test_save_and_load_give_the_same_predictions(tmp_path) -> None:
    x, y = blobs(120, 6)
    model = BayesianClassifier(hidden=(8,), epochs=10, seed=0).fit(x, y)
    loaded = BayesianClassifier.load(model.save(tmp_path / "classifier"))
    np.testing.assert_array_equal(loaded.predict_proba(x), model.predict_proba(x))
    assert list(loaded.classes_) == list(model.classes_)


@pytest.mark.parametrize(
    ("x", "y", "message"),
    [
        (np.zeros((4, 2)), np.array(["a"] * 4), "y holds one class"),
        (np.zeros((4, 2)), np.array([0, 1, 0]), r"y must be 1-D with 4 labels"),
        (np.array([[0.0, 1.0], [np.nan, 1.0]]), np.array([0, 1]), "X has NaN or inf in row 1"),
        (np.zeros(4), np.array([0, 1, 0, 1]), "Expected 2D array, got 1D array"),
        (np.zeros((4, 2)), [0.3, 1.7, 2.0, 1.0], r"y\[0\] = 0.3 is not a whole number"),
        (np.zeros((4, 2)), np.array([0.0, 1.0, 2.5, 1.0]), r"y\[2\] = 2.5 .* regression target"),
        (np.zeros((4, 2)), np.array([0.0, np.nan, 1.0, 1.0]), r"y\[1\] = nan .*BayesianRegressor"),
    ],
)
def test_bad_input_is_named(x, y, message) -> None:
    """Refused before any training: a billion epochs would never end."""
    model = BayesianClassifier(epochs=10**9)
    with pytest.raises(ValueError, match=message):
        model.fit(x, y)
    assert not hasattr(model, "model_")


def test_whole_number_float_labels_are_classes() -> None:
    x, y = blobs(60, 7)
    codes = np.searchsorted(["a", "b", "c"], y).astype(np.float64)  # 0.0, 1.0, 2.0
    model = BayesianClassifier(hidden=(4,), epochs=1).fit(x, codes)
    assert model.classes_.tolist() == [0.0, 1.0, 2.0]


def test_unknown_family_and_unseen_labels_are_named() -> None:
    x, y = blobs(60, 7)
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        BayesianClassifier(family="nope", epochs=1).fit(x, y)
    model = BayesianClassifier(hidden=(4,), epochs=1).fit(x, y)
    with pytest.raises(ValueError, match=r"y\[1\] = 'z' is not a class seen in fit"):
        model.score(x[:2], np.array(["a", "z"]))
    with pytest.raises(ValueError, match="X has 3 features, but BayesianClassifier is expecting 2"):
        model.predict(np.zeros((2, 3)))


def test_with_the_defaults_the_mutual_information_grows_away_from_the_data() -> None:
    """The defaults (tanh, initial posterior std 0.01) on 300 rows of three blobs: the epistemic
    part of the predictive entropy is at least 3x larger on a circle of radius 8 than on the
    data, and the median weight std has moved at least 10x from its initial value (with the
    family's own 1e-4 the mutual information was 0.000 nats on the data and far from it)."""
    x, y = blobs(300, 0)
    model = BayesianClassifier(seed=0).fit(x, y)
    angles = np.linspace(0, 2 * np.pi, 50, endpoint=False)
    far = 8 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    near = model.predict_uncertainty(blobs(200, 2)[0])["epistemic"].mean()
    away = model.predict_uncertainty(far)["epistemic"].mean()
    assert away > 3 * near and away > 0.01  # nats; from the layers' 1e-4 it is below 0.001
    stds = np.concatenate(
        [p.detach().exp().numpy().ravel()
         for name, p in model.model_.named_parameters() if name.endswith("log_std")]
    )  # fmt: skip
    assert np.median(stds) > 10 * 0.01
