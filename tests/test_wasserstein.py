"""Sample-based W2 (POT exact transport): 1-D closed form, Gaussian samples, the gap's sign."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ot")

from vbnn.references.gaussian_gap import empirical_covariance
from vbnn.references.wasserstein import empirical_wasserstein2, wasserstein_gaps


def test_one_dimensional_transport_pairs_sorted_samples() -> None:
    """In 1-D the optimal plan matches order statistics: W2^2 = mean((x_(i) - y_(i))^2)."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((200, 1)), 2 + 3 * rng.standard_normal((200, 1))
    expected = np.sqrt(np.mean((np.sort(x[:, 0]) - np.sort(y[:, 0])) ** 2))
    assert empirical_wasserstein2(x, y) == pytest.approx(expected, rel=1e-9)
    with pytest.raises(ValueError, match="samples must both be"):
        empirical_wasserstein2(x, y[:10])


def test_gaussian_samples_are_as_far_from_q_full_as_the_baseline_and_nearer_than_q_diag() -> None:
    """Correlated Gaussian samples: W2_hat(samples, q_full) is the estimator's bias (baseline,
    within 5 %), and the diagonal Gaussian is farther (its W2 exceeds it by > 10 %)."""
    rng = np.random.default_rng(1)
    dimension = 10
    mixing = rng.standard_normal((dimension, dimension))
    covariance = mixing @ mixing.T / dimension + 0.1 * np.eye(dimension)
    samples = rng.multivariate_normal(np.zeros(dimension), covariance, size=4000)
    mean, fitted = empirical_covariance(samples, 1e-6)
    gaps = wasserstein_gaps(samples, mean, fitted, subsample=1000, seed=2)
    assert gaps["sample_w2_full"] == pytest.approx(gaps["sample_w2_baseline"], rel=0.05)
    assert gaps["sample_w2_gap"] > 0.1 * gaps["sample_w2_full"]


def test_gaussians_that_do_not_fit_the_samples_are_refused() -> None:
    samples = np.zeros((50, 3))
    with pytest.raises(ValueError, match=r"covariance \(2, 2\) do not fit samples \(50, 3\)"):
        wasserstein_gaps(samples, np.zeros(3), np.eye(2), subsample=10, seed=0)
