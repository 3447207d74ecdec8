"""Closest diagonal Gaussian, its KL to the full Gaussian, and the Gaussian W2 distance."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from vbnn.references.gaussian_gap import (
    closest_diagonal_variance,
    diagonal_gap,
    empirical_covariance,
    gaussian_kl,
    kl_closest_diagonal,
    kl_full_to_moment_matched_diagonal,
    psd_square_root,
    wasserstein2_gaussian,
)


def _random_covariance(dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    factor = rng.normal(size=(dim, dim))
    return factor @ factor.T / dim + 0.1 * np.eye(dim)


def test_gaussian_kl_matches_torch() -> None:
    rng = np.random.default_rng(0)
    cov_p, cov_q = _random_covariance(4, 1), _random_covariance(4, 2)
    mean_p, mean_q = rng.normal(size=4), rng.normal(size=4)
    expected = kl_divergence(
        MultivariateNormal(torch.tensor(mean_p), torch.tensor(cov_p)),
        MultivariateNormal(torch.tensor(mean_q), torch.tensor(cov_q)),
    )
    assert gaussian_kl(mean_p, cov_p, mean_q, cov_q) == pytest.approx(float(expected), rel=1e-10)


def test_closest_diagonal_matches_numerical_minimisation() -> None:
    covariance = _random_covariance(5, 3)
    zero = np.zeros(5)

    def objective(log_variance: np.ndarray) -> float:
        return gaussian_kl(zero, np.diag(np.exp(log_variance)), zero, covariance)

    start = np.log(np.diag(covariance))  # the moment-matched diagonal: not the optimum
    result = scipy.optimize.minimize(objective, start, method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose(np.exp(result.x), closest_diagonal_variance(covariance), rtol=1e-5)
    assert kl_closest_diagonal(covariance) == pytest.approx(result.fun, rel=1e-7)
    assert objective(start) > result.fun + 1e-3  # the two diagonals differ on this Gaussian


def test_kl_is_zero_for_a_diagonal_covariance() -> None:
    covariance = np.diag([0.3, 2.0, 1.5, 0.01])
    assert kl_closest_diagonal(covariance) == pytest.approx(0.0, abs=1e-12)
    assert kl_full_to_moment_matched_diagonal(covariance) == pytest.approx(0.0, abs=1e-12)
    assert diagonal_gap(covariance)["wasserstein2"] == pytest.approx(0.0, abs=1e-7)


def test_kl_of_a_correlated_pair() -> None:
    # 2-D, unit variances, correlation r: Sigma^-1 has diagonal 1/(1-r^2); KL = -1/2 log(1-r^2)
    r = 0.8
    covariance = np.array([[1.0, r], [r, 1.0]])
    np.testing.assert_allclose(closest_diagonal_variance(covariance), [1 - r**2, 1 - r**2])
    assert kl_closest_diagonal(covariance) == pytest.approx(-0.5 * np.log(1 - r**2))


def test_wasserstein_commuting_case() -> None:
    # diagonal covariances commute: W2^2 = |dm|^2 + sum (sqrt a - sqrt b)^2
    a, b = np.array([0.5, 2.0, 3.0]), np.array([1.5, 0.2, 3.0])
    mean_p, mean_q = np.array([0.0, 1.0, -1.0]), np.array([1.0, 1.0, 0.5])
    expected = np.sqrt(((mean_p - mean_q) ** 2).sum() + ((np.sqrt(a) - np.sqrt(b)) ** 2).sum())
    assert wasserstein2_gaussian(mean_p, np.diag(a), mean_q, np.diag(b)) == pytest.approx(expected)


def test_wasserstein_matches_sqrtm_and_is_symmetric() -> None:
    cov_p, cov_q = _random_covariance(6, 4), _random_covariance(6, 5)
    root_p = scipy.linalg.sqrtm(cov_p).real
    cross = scipy.linalg.sqrtm(root_p @ cov_q @ root_p).real
    expected = np.sqrt(np.trace(cov_p) + np.trace(cov_q) - 2 * np.trace(cross))
    zero = np.zeros(6)
    assert wasserstein2_gaussian(zero, cov_p, zero, cov_q) == pytest.approx(expected, rel=1e-8)
    assert wasserstein2_gaussian(zero, cov_q, zero, cov_p) == pytest.approx(expected, rel=1e-8)
    np.testing.assert_allclose(psd_square_root(cov_p), root_p, atol=1e-10)


def test_empirical_covariance_and_errors() -> None:
    samples = np.random.default_rng(6).normal(size=(50, 3))
    mean, covariance = empirical_covariance(samples, jitter=1e-3)
    np.testing.assert_allclose(covariance, np.cov(samples.T) + 1e-3 * np.eye(3))
    np.testing.assert_allclose(mean, samples.mean(0))
    with pytest.raises(ValueError, match="positive definite"):
        kl_closest_diagonal(np.ones((3, 3)))
    with pytest.raises(ValueError, match="square"):
        kl_closest_diagonal(np.ones((3, 2)))
    with pytest.raises(ValueError, match="samples must be"):
        empirical_covariance(np.ones(3))
