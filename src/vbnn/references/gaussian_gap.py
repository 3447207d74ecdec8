"""The gap between a full-covariance Gaussian and its closest diagonal Gaussian.

Paper: Farquhar, Smith & Gal (2020, section 4, eqs. 5-6,
appendix B) and the blog post (Farquhar et al. 2020 blog, "Wasserstein error").

q_full = N(mu, Sigma) is fitted to posterior samples; q_diag = N(mu', Sigma') minimises
KL(q_diag || q_full) over diagonal Sigma', which gives (eqs. 5-6)

    mu' = mu,      Sigma' = diag(Sigma^-1)^-1      (the precision's diagonal, inverted).

Then tr(Sigma^-1 Sigma') = D and the divergence reduces to

    KL(q_diag || q_full) = 1/2 [ log det Sigma - log det Sigma' ]
                         = 1/2 [ log det Sigma + sum_i log (Sigma^-1)_ii ].

All functions work in float64 NumPy/SciPy (dimension D up to a few thousand; one Cholesky and
one symmetric eigendecomposition each).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.special import digamma


def _check_square(name: str, covariance: np.ndarray) -> np.ndarray:
    covariance = np.asarray(covariance, dtype=np.float64)
    if covariance.ndim != 2 or covariance.shape[0] != covariance.shape[1]:
        raise ValueError(f"{name}: covariance must be square (D, D), got {covariance.shape}")
    if not np.all(np.isfinite(covariance)):
        raise ValueError(f"{name}: covariance has non-finite entries")
    return covariance


def _cholesky(name: str, covariance: np.ndarray) -> np.ndarray:
    try:
        return scipy.linalg.cholesky(covariance, lower=True)
    except np.linalg.LinAlgError:
        raise ValueError(
            f"{name}: covariance is not positive definite; add jitter to its diagonal"
        ) from None


def empirical_covariance(
    samples: np.ndarray, jitter: float = 1e-4
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and empirical covariance (1/(N-1)) of samples, plus ``jitter`` on the diagonal.

    With N samples in D dimensions the empirical covariance has rank <= N - 1; the jitter (Farquhar
    et al. 2020, appendix B adds one "to improve the stability") makes it positive definite.

    Args:
        samples: (N, D).

    Returns:
        mean (D,), covariance (D, D).
    """
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim != 2 or samples.shape[0] < 2:
        raise ValueError(f"empirical_covariance: samples must be (N >= 2, D), got {samples.shape}")
    if jitter < 0:
        raise ValueError(f"empirical_covariance: jitter must be >= 0, got {jitter}")
    covariance = np.cov(samples, rowvar=False).reshape(samples.shape[1], samples.shape[1])
    return samples.mean(0), covariance + jitter * np.eye(samples.shape[1])


def closest_diagonal_variance(covariance: np.ndarray) -> np.ndarray:
    """Sigma' = diag(Sigma^-1)^-1 (eq. 6 of Farquhar et al. 2020), as a vector of variances (D,).

    diag(Sigma^-1)_i = sum_k (L^-1)_ki^2 with Sigma = L L^T, so no explicit inverse is formed.
    """
    covariance = _check_square("closest_diagonal_variance", covariance)
    factor = _cholesky("closest_diagonal_variance", covariance)
    inverse_factor = scipy.linalg.solve_triangular(factor, np.eye(len(factor)), lower=True)
    return 1.0 / (inverse_factor**2).sum(0)


def gaussian_kl(
    mean_p: np.ndarray, covariance_p: np.ndarray, mean_q: np.ndarray, covariance_q: np.ndarray
) -> float:
    """KL(N(mean_p, covariance_p) || N(mean_q, covariance_q)) for full covariances.

    KL = 1/2 [ tr(S_q^-1 S_p) + (m_q - m_p)^T S_q^-1 (m_q - m_p) - D + log det S_q - log det S_p ].
    """
    covariance_p = _check_square("gaussian_kl p", covariance_p)
    covariance_q = _check_square("gaussian_kl q", covariance_q)
    factor_p = _cholesky("gaussian_kl p", covariance_p)
    factor_q = _cholesky("gaussian_kl q", covariance_q)
    whitened = scipy.linalg.solve_triangular(factor_q, factor_p, lower=True)
    difference = scipy.linalg.solve_triangular(
        factor_q, np.asarray(mean_q, dtype=np.float64) - mean_p, lower=True
    )
    log_det_q = 2 * np.log(np.diag(factor_q)).sum()
    log_det_p = 2 * np.log(np.diag(factor_p)).sum()
    dim = len(covariance_p)
    return float(0.5 * ((whitened**2).sum() + (difference**2).sum() - dim + log_det_q - log_det_p))


def kl_closest_diagonal(covariance: np.ndarray) -> float:
    """KL(q_diag || q_full) with q_diag the closest diagonal Gaussian (same mean), closed form.

    = 1/2 [ log det Sigma + sum_i log (Sigma^-1)_ii ]  (>= 0, zero iff Sigma is diagonal).
    """
    covariance = _check_square("kl_closest_diagonal", covariance)
    factor = _cholesky("kl_closest_diagonal", covariance)
    log_det = 2 * np.log(np.diag(factor)).sum()
    return float(0.5 * (log_det - np.log(closest_diagonal_variance(covariance)).sum()))


def kl_full_to_moment_matched_diagonal(covariance: np.ndarray) -> float:
    """KL(q_full || N(mu, diag(Sigma))): the blog's direction; its best diagonal is diag(Sigma).

    = 1/2 [ sum_i log Sigma_ii - log det Sigma ].
    """
    covariance = _check_square("kl_full_to_moment_matched_diagonal", covariance)
    factor = _cholesky("kl_full_to_moment_matched_diagonal", covariance)
    return float(0.5 * (np.log(np.diag(covariance)).sum() - 2 * np.log(np.diag(factor)).sum()))


def psd_square_root(matrix: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric positive semi-definite matrix (eigendecomposition).

    Eigenvalues below zero (round-off) are clipped to zero. scipy.linalg.sqrtm gives the same
    matrix for PSD input but is slower and may return complex round-off; the tests compare both.
    """
    matrix = _check_square("psd_square_root", matrix)
    values, vectors = scipy.linalg.eigh(0.5 * (matrix + matrix.T))
    return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T


def wasserstein2_gaussian(
    mean_p: np.ndarray, covariance_p: np.ndarray, mean_q: np.ndarray, covariance_q: np.ndarray
) -> float:
    """2-Wasserstein distance between N(m_p, S_p) and N(m_q, S_q) (Dowson & Landau 1982).

    W2^2 = |m_p - m_q|^2 + tr S_p + tr S_q - 2 tr (S_p^1/2 S_q S_p^1/2)^1/2.

    The trace of the inner square root is the sum of square roots of the (clipped) eigenvalues of
    the symmetric matrix S_p^1/2 S_q S_p^1/2. Returns W2 (not squared).
    """
    covariance_p = _check_square("wasserstein2_gaussian p", covariance_p)
    covariance_q = _check_square("wasserstein2_gaussian q", covariance_q)
    root_p = psd_square_root(covariance_p)
    middle = root_p @ covariance_q @ root_p
    values = scipy.linalg.eigvalsh(0.5 * (middle + middle.T))
    cross = np.sqrt(np.clip(values, 0.0, None)).sum()
    squared_mean = float(((np.asarray(mean_p) - np.asarray(mean_q)) ** 2).sum())
    squared = squared_mean + np.trace(covariance_p) + np.trace(covariance_q) - 2 * cross
    return float(np.sqrt(max(squared, 0.0)))


def diagonal_gap(covariance: np.ndarray) -> dict[str, float]:
    """All gap measures for one full covariance (mean kept, so the means do not enter).

    Returns:
        kl_diag_full: KL(q_diag || q_full) (Farquhar et al. 2020, Fig. 2);
        wasserstein2: W2(q_diag, q_full) (the blog's Wasserstein figure, between the Gaussians);
        kl_full_diag: KL(q_full || N(mu, diag Sigma)) (the blog's KL direction).
    """
    covariance = _check_square("diagonal_gap", covariance)
    variance = closest_diagonal_variance(covariance)
    zero = np.zeros(len(covariance))
    return {
        "kl_diag_full": kl_closest_diagonal(covariance),
        "wasserstein2": wasserstein2_gaussian(zero, np.diag(variance), zero, covariance),
        "kl_full_diag": kl_full_to_moment_matched_diagonal(covariance),
    }


def kl_closest_diagonal_null(
    variances: np.ndarray, draws: int, jitter: float = 1e-4, seed: int = 0
) -> float:
    """What :func:`kl_closest_diagonal` of an empirical covariance reports when there is no
    correlation at all: the KL of the covariance (+ ``jitter``) of ``draws`` independent draws
    of N(0, diag(variances)).

    The estimator's floor, its bias: the true value is 0, but sampling noise correlates every
    pair of the D coordinates a little. For draws N >> D it is about D (D - 1) / (4 N), a quarter
    of the summed squared sample correlations; it grows much faster as N nears D. Autocorrelated
    draws (MCMC) behave like fewer independent ones, so for chains this is a lower bound.
    """
    variances = np.asarray(variances, dtype=np.float64)
    if variances.ndim != 1 or not np.all(variances > 0):
        raise ValueError(
            "kl_closest_diagonal_null: variances must be a vector of positive numbers, got shape "
            f"{variances.shape}"
        )
    if draws <= len(variances) and jitter == 0:
        raise ValueError(
            f"kl_closest_diagonal_null: {draws} draws in {len(variances)} dimensions give a "
            "singular covariance; add jitter or draw more"
        )
    rng = np.random.default_rng(seed)
    samples = rng.standard_normal((draws, len(variances))) * np.sqrt(variances)
    return kl_closest_diagonal(empirical_covariance(samples, jitter)[1])


def expected_kl_floor(dimension: int, draws: int) -> float:
    """The mean of :func:`kl_closest_diagonal_null` without jitter, in closed form.

    With ``draws`` N independent draws of a D-dimensional Gaussian with diagonal covariance, the
    empirical covariance is S = W / nu with W ~ Wishart(nu = N - 1, diag) (the KL is unchanged by
    a diagonal rescaling, so take the identity). Then E log det W = sum_{i=1}^{D} psi((nu - i +
    1) / 2) + D log 2, and 1 / (W^-1)_ii, the residual of coordinate i given the others, is
    chi^2 with nu - D + 1 degrees of freedom, so E log (W^-1)_ii = -psi((nu - D + 1) / 2) - log 2:

        E KL = 1/2 [ sum_{i=1}^{D} psi((nu - i + 1) / 2) - D psi((nu - D + 1) / 2) ],

    about D (D - 1) / (4 nu) when nu >> D (psi(x) ~ log x).

    Raises:
        ValueError: ``draws <= dimension`` (the empirical covariance is singular) or D < 1.
    """
    if dimension < 1 or draws <= dimension:
        raise ValueError(
            f"expected_kl_floor: needs 1 <= dimension < draws, got dimension {dimension} and "
            f"{draws} draws"
        )
    nu = draws - 1
    rows = np.arange(1, dimension + 1)
    return float(
        0.5 * (digamma((nu - rows + 1) / 2).sum() - dimension * digamma((nu - dimension + 1) / 2))
    )


def draws_for_floor(dimension: int, floor: float) -> int:
    """The fewest independent draws N whose :func:`expected_kl_floor` is at most ``floor``.

    The floor falls monotonically in N; bisection from the asymptote D (D - 1) / (4 (N - 1)),
    which is below the exact value, so N >= 1 + D (D - 1) / (4 floor).
    """
    if floor <= 0:
        raise ValueError(f"draws_for_floor: floor must be positive, got {floor}")
    low = dimension  # expected_kl_floor is infinite at N = D
    high = max(dimension + 1, int(np.ceil(1 + 2 * dimension * dimension / floor)))
    while expected_kl_floor(dimension, high) > floor:
        high *= 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (
            (low, middle) if expected_kl_floor(dimension, middle) <= floor else (middle, high)
        )
    return high


def kl_closest_diagonal_chain_null(
    chains: np.ndarray, jitter: float = 1e-4, seed: int = 0
) -> float:
    """The estimator's floor for MCMC draws: :func:`kl_closest_diagonal` of the pooled draws
    after each coordinate's chains are decoupled from the other coordinates.

    Every coordinate gets its own random order of the chains and its own random circular shift
    in time within each chain, so it keeps its marginal, its autocorrelation and its chains'
    levels, while its pairing with the other coordinates is broken: no cross-coordinate
    dependence is left but what sampling noise makes. Unlike :func:`kl_closest_diagonal_null`
    this counts that autocorrelated draws are worth fewer independent ones. Shifts shorter than a
    coordinate's autocorrelation time leave some of its coupling in place (chains that do not
    mix), so the floor is then too low.

    Args:
        chains: (chains, draws, D).
    """
    chains = np.asarray(chains, dtype=np.float64)
    if chains.ndim != 3 or chains.shape[0] * chains.shape[1] < 2:
        raise ValueError(
            f"kl_closest_diagonal_chain_null: chains must be (chains, draws, D), got {chains.shape}"
        )
    count, length, dim = chains.shape
    rng = np.random.default_rng(seed)
    order = rng.permuted(np.tile(np.arange(count)[:, None], (1, dim)), axis=0)  # (chains, D)
    shift = rng.integers(0, length, size=(count, dim))
    time = (np.arange(length)[None, :, None] + shift[:, None, :]) % length
    decoupled = chains[order[:, None, :], time, np.arange(dim)[None, None, :]]
    return kl_closest_diagonal(empirical_covariance(decoupled.reshape(-1, dim), jitter)[1])


def _kl_and_chain_floor(chains: np.ndarray, jitter: float, seed: int) -> tuple[float, float]:
    """:func:`kl_closest_diagonal` of the pooled (chains, draws, D) draws and its floor."""
    pooled = chains.reshape(-1, chains.shape[-1])
    kl = kl_closest_diagonal(empirical_covariance(pooled, jitter)[1])
    return kl, kl_closest_diagonal_chain_null(chains, jitter, seed)


def kl_above_floor_limit(
    chains: np.ndarray, jitter: float = 1e-4, seed: int = 0
) -> dict[str, float]:
    """The KL above the chain floor extrapolated to infinitely many draws (split-half
    Richardson extrapolation, the delete-half jackknife's bias correction), and how far that
    extrapolation moves when it is made from half the draws.

    For independent Gaussian draws the estimator's bias does not depend on Sigma (log det S and
    the residual variances 1 / (S^-1)_ii have Sigma-free Wishart laws), so the floor removes it.
    Two things leave a bias of order 1 / N that a null with decoupled coordinates cannot carry:
    dependence between coordinates that is not correlation (a scale shared by all of them, say),
    and in chains, dependence between coordinates across time (lagged cross-covariances), which
    falls with the chains' length. With K(N) = a + b / N + o(1 / N),

        K_limit = 2 K(N) - K(N / 2),

    where K(N / 2) is the mean over the two halves of the draws, a half keeping the first (or
    last) half of every chain so that its draws are as autocorrelated as the whole, and each K
    is :func:`kl_closest_diagonal` of the pooled draws less their floor
    :func:`kl_closest_diagonal_chain_null`. The same extrapolation from the halves and the
    quarters, 2 K(N / 2) - K(N / 4), should land on the same limit once the draws are in the
    1 / N regime; ``kl_above_floor_limit_drift``, the first limit less this one, says how far
    they are from it. On heavy-tailed draws the o(1 / N) rest is positive: the limit removes
    most of the excess, not all of it.

    Args:
        chains: (chains, draws >= 4, D).

    Returns:
        ``kl_floor_chains`` (the floor of all draws), ``kl_above_floor`` K(N),
        ``kl_above_floor_halves`` K(N / 2), ``kl_above_floor_quarters`` K(N / 4),
        ``kl_above_floor_limit`` K_limit and ``kl_above_floor_limit_drift``.
    """
    chains = np.asarray(chains, dtype=np.float64)
    if chains.ndim != 3 or chains.shape[1] < 4:
        raise ValueError(
            f"kl_above_floor_limit: chains must be (chains, draws >= 4, D), got {chains.shape}"
        )
    kl, floor = _kl_and_chain_floor(chains, jitter, seed)
    above = {1: kl - floor}
    for parts in (2, 4):
        length = chains.shape[1] // parts
        above[parts] = float(np.mean([
            np.subtract(*_kl_and_chain_floor(
                chains[:, part * length : (part + 1) * length], jitter, seed + parts + part
            ))
            for part in range(parts)
        ]))  # fmt: skip
    limit = 2 * above[1] - above[2]
    return {
        "kl_floor_chains": floor,
        "kl_above_floor": above[1],
        "kl_above_floor_halves": above[2],
        "kl_above_floor_quarters": above[4],
        "kl_above_floor_limit": limit,
        "kl_above_floor_limit_drift": limit - (2 * above[2] - above[4]),
    }
