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
    draws_for_floor,
    empirical_covariance,
    expected_kl_floor,
    gaussian_kl,
    kl_above_floor_limit,
    kl_closest_diagonal,
    kl_closest_diagonal_chain_null,
    kl_closest_diagonal_null,
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


def test_null_kl_is_a_quarter_of_the_summed_squared_sample_correlations() -> None:
    """Independent coordinates: E r_ij^2 = 1 / (N - 1), so for N >> D the floor is
    D (D - 1) / (4 (N - 1)); it depends on the variances only through the jitter."""
    dim, draws = 20, 20_000
    variances = np.linspace(0.5, 3.0, dim)
    floors = [kl_closest_diagonal_null(variances, draws, jitter=0.0, seed=s) for s in range(10)]
    np.testing.assert_allclose(np.mean(floors), dim * (dim - 1) / (4 * (draws - 1)), rtol=0.1)
    scaled = kl_closest_diagonal_null(100 * variances, draws, jitter=0.0, seed=3)
    np.testing.assert_allclose(scaled, floors[3], rtol=1e-9)
    near = kl_closest_diagonal_null(np.ones(dim), 2 * dim, jitter=0.0, seed=0)
    assert near > 1.5 * dim * (dim - 1) / (4 * (2 * dim - 1))  # the N >> D rule undercounts
    with pytest.raises(ValueError, match="singular"):
        kl_closest_diagonal_null(np.ones(dim), dim, jitter=0.0)
    with pytest.raises(ValueError, match="positive"):
        kl_closest_diagonal_null(-np.ones(dim), draws)


def _ar1_chains(rng: np.random.Generator, shape: tuple[int, int, int], phi: float) -> np.ndarray:
    """Independent AR(1) processes with unit marginal variance, (chains, draws, D)."""
    chains = np.empty(shape)
    chains[:, 0] = rng.standard_normal((shape[0], shape[2]))
    for t in range(1, shape[1]):
        noise = rng.standard_normal((shape[0], shape[2]))
        chains[:, t] = phi * chains[:, t - 1] + np.sqrt(1 - phi**2) * noise
    return chains


def test_chain_null_matches_the_estimator_on_uncorrelated_autocorrelated_chains() -> None:
    """With no correlation between coordinates the estimator's own value is a draw from its
    floor: the chain null must match it on average, while the independent-draws null, blind to
    autocorrelation (AR(1) phi 0.9: ~20x fewer effective draws), falls far below; a
    pairing puts the estimate far above the chain null."""
    dim, scales = 40, np.linspace(0.5, 2.0, 40)
    estimate, chain_null, iid_null, coupled, coupled_null = [], [], [], [], []
    for seed in range(8):
        chains = _ar1_chains(np.random.default_rng(seed), (4, 300, dim), 0.9) * scales
        pooled = chains.reshape(-1, dim)
        estimate.append(kl_closest_diagonal(empirical_covariance(pooled, 0.0)[1]))
        chain_null.append(kl_closest_diagonal_chain_null(chains, 0.0, seed=seed))
        iid_null.append(kl_closest_diagonal_null(pooled.var(0, ddof=1), len(pooled), 0.0, seed))
        paired = chains.copy()
        paired[..., 1::2] += 2.0 * chains[..., ::2]  # 20 pairs, correlation 0.89: KL 16.1
        coupled.append(kl_closest_diagonal(empirical_covariance(paired.reshape(-1, dim), 0.0)[1]))
        coupled_null.append(kl_closest_diagonal_chain_null(paired, 0.0, seed=seed))
    np.testing.assert_allclose(np.mean(chain_null), np.mean(estimate), rtol=0.1)
    assert np.mean(iid_null) < 0.25 * np.mean(estimate)
    assert np.mean(coupled) > 2 * np.mean(coupled_null)
    with pytest.raises(ValueError, match="chains must be"):
        kl_closest_diagonal_chain_null(np.ones((300, dim)))


def test_the_floor_in_closed_form_is_the_mean_of_the_null_estimator() -> None:
    """Wishart moments against Monte Carlo: the mean of 20 null KLs within 4 standard errors."""
    for dim, draws in [(5, 12), (40, 60), (200, 1000)]:
        floors = [
            kl_closest_diagonal_null(np.ones(dim), draws, jitter=0.0, seed=s) for s in range(20)
        ]
        error = np.std(floors, ddof=1) / np.sqrt(len(floors))
        assert abs(np.mean(floors) - expected_kl_floor(dim, draws)) < 4 * error, (dim, draws)
    dim = 30  # far more draws than dimensions: the asymptote D (D - 1) / (4 (N - 1))
    assert expected_kl_floor(dim, 10**6) == pytest.approx(
        dim * (dim - 1) / (4 * (10**6 - 1)), rel=1e-3
    )
    with pytest.raises(ValueError, match="dimension 10 and 10 draws"):
        expected_kl_floor(10, 10)


def test_draws_for_floor_is_the_fewest_that_reach_it() -> None:
    for dim, floor in [(10, 0.5), (997, 21.1), (300, 3.0)]:
        draws = draws_for_floor(dim, floor)
        assert expected_kl_floor(dim, draws) <= floor < expected_kl_floor(dim, draws - 1)


def test_for_gaussian_draws_the_bias_is_the_floor_whatever_the_correlation() -> None:
    """log det S and the residual variances 1 / (S^-1)_ii have Sigma-free Wishart laws, so the
    estimator's mean less the true KL is ``expected_kl_floor`` for a correlated Sigma too."""
    dim, draws = 30, 200
    covariance = _random_covariance(dim, 1)
    factor = np.linalg.cholesky(covariance)
    truth = kl_closest_diagonal(covariance)
    rng = np.random.default_rng(0)
    bias = [
        kl_closest_diagonal(
            empirical_covariance(rng.standard_normal((draws, dim)) @ factor.T, 0.0)[1]
        )
        - truth
        for _ in range(200)
    ]
    error = np.std(bias, ddof=1) / np.sqrt(len(bias))
    assert truth > 5.0  # far from diagonal
    assert abs(np.mean(bias) - expected_kl_floor(dim, draws)) < 4 * error


def _limits(draw: object, repeats: int) -> dict[str, np.ndarray]:
    """``kl_above_floor_limit`` of ``repeats`` draw sets, each entry an array over them."""
    rows = [kl_above_floor_limit(draw(np.random.default_rng(s)), 0.0, s) for s in range(repeats)]
    return {name: np.array([row[name] for row in rows]) for name in rows[0]}


def test_the_limit_removes_the_excess_of_a_shared_scale_and_keeps_a_gaussian_gap() -> None:
    """Multivariate Student-t (5 degrees of freedom, identity scale): the coordinates are
    uncorrelated (true gap 0) but share a scale, which the decoupled floor does not carry, so
    the KL above the floor stays positive and about doubles when the draws halve; the
    split-half limit removes most of it, more than the same extrapolation from the halves and
    quarters. On correlated Gaussian draws it is unbiased for the
    true KL."""
    dim, shape = 30, (4, 400, 30)

    def student(rng: np.random.Generator) -> np.ndarray:
        scale = np.sqrt(rng.chisquare(5, (*shape[:2], 1)) / 5)
        return rng.standard_normal(shape) / scale

    heavy = _limits(student, 40)
    above = heavy["kl_above_floor"]
    assert np.mean(above) > 8 * np.std(above, ddof=1) / np.sqrt(len(above))  # the floor leaves it
    assert np.mean(heavy["kl_above_floor_halves"]) == pytest.approx(2 * np.mean(above), rel=0.3)
    assert np.mean(heavy["kl_above_floor_quarters"]) > np.mean(heavy["kl_above_floor_halves"])
    limit = heavy["kl_above_floor_limit"]
    assert np.mean(limit) < 0.35 * np.mean(above)  # most of it removed
    from_halves = limit - heavy["kl_above_floor_limit_drift"]  # 2 K(N / 2) - K(N / 4)
    assert np.mean(limit) < np.mean(from_halves) < np.mean(above)  # nearer 0 with more draws

    factor = np.linalg.cholesky(_random_covariance(dim, 2))
    truth = kl_closest_diagonal(factor @ factor.T)
    limit = _limits(lambda rng: rng.standard_normal(shape) @ factor.T, 40)["kl_above_floor_limit"]
    error = np.std(limit, ddof=1) / np.sqrt(len(limit))
    assert truth > 5.0
    assert abs(np.mean(limit) - truth) < 4 * error
    with pytest.raises(ValueError, match="draws >= 4"):
        kl_above_floor_limit(np.ones((4, 3, dim)))
