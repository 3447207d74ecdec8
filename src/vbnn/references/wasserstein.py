"""2-Wasserstein distances between MCMC samples and Gaussians fitted to them (``vbnn[jax]``: POT).

The blog (Farquhar et al. 2020 blog, "Wasserstein Error") compares W2(true posterior, q_full) with
W2(true posterior, q_diag); their difference is the error the mean-field assumption adds beyond
the Gaussian one. Here the true posterior is represented by n draws thinned evenly from the pooled
NUTS chains; q_full = N(m, Sigma) is the Gaussian fitted to them (empirical mean and covariance +
jitter) and q_diag = N(m, diag(Sigma^-1)^-1) the closest diagonal Gaussian (Farquhar et al. 2020 eq.
6).

Estimator: the exact optimal transport between the n samples and n independent draws of the
Gaussian (``ot.emd2`` with squared Euclidean costs; uniform weights, so the plan is a permutation):

    W2_hat(X, Y)^2 = min_pi (1/n) sum_i |x_i - y_pi(i)|^2.

It is biased upwards: two independent samples of the *same* distribution are at a distance that
shrinks only like n^(-1/D) in D dimensions. ``baseline`` reports that bias for q_full (W2_hat of
two independent n-samples of N(m, Sigma)); the gap W2_hat(samples, q_diag) - W2_hat(samples,
q_full) cancels most of it (the blog: "a bias in the way this is estimated means it will never go
to zero").
"""

from __future__ import annotations

import numpy as np

from vbnn.references.gaussian_gap import closest_diagonal_variance


def empirical_wasserstein2(first: np.ndarray, second: np.ndarray) -> float:
    """Exact W2 between the empirical measures of two equally sized samples (n, D)."""
    first, second = np.asarray(first, np.float64), np.asarray(second, np.float64)
    if first.ndim != 2 or first.shape != second.shape:
        raise ValueError(
            f"empirical_wasserstein2: samples must both be (n, D), got {first.shape} and "
            f"{second.shape}"
        )
    # imported here, not above: the depth units' chains run without POT (a GPU machine that
    # only samples, ``--chains-only``); only their records need it
    import ot

    weights = np.full(len(first), 1.0 / len(first))
    cost = ot.dist(first, second, metric="sqeuclidean")
    return float(np.sqrt(max(ot.emd2(weights, weights, cost, numItermax=10_000_000), 0.0)))


def wasserstein_gaps(
    samples: np.ndarray, mean: np.ndarray, covariance: np.ndarray, subsample: int, seed: int
) -> dict[str, float]:
    """W2_hat of the samples to q_full = N(mean, covariance) and to q_diag (its closest diagonal
    Gaussian), their difference, and the bias baseline.

    Args:
        samples: (N, D) pooled draws; ``subsample`` of them are taken evenly spaced.
        mean, covariance: (D,) and (D, D), q_full: the samples' own (``empirical_covariance``
            with its jitter).
        subsample: n, the size of every sample the transport is solved between.
        seed: of the Gaussian draws.
    """
    samples = np.asarray(samples, np.float64)
    if samples.ndim != 2 or not 2 <= subsample <= len(samples):
        raise ValueError(
            f"wasserstein_gaps: need samples (N, D) with N >= subsample >= 2, got "
            f"{samples.shape} and subsample={subsample}"
        )
    if np.shape(mean) != samples.shape[1:] or np.shape(covariance) != 2 * samples.shape[1:]:
        raise ValueError(
            f"wasserstein_gaps: mean {np.shape(mean)} and covariance {np.shape(covariance)} do "
            f"not fit samples {samples.shape}"
        )
    thinned = samples[np.linspace(0, len(samples) - 1, subsample).round().astype(int)]
    rng = np.random.default_rng(seed)
    factor = np.linalg.cholesky(covariance)
    noise = rng.standard_normal((3, subsample, len(mean)))
    full_draws = mean + noise[0] @ factor.T
    baseline_draws = mean + noise[1] @ factor.T
    diagonal_draws = mean + noise[2] * np.sqrt(closest_diagonal_variance(covariance))
    full = empirical_wasserstein2(thinned, full_draws)
    diagonal = empirical_wasserstein2(thinned, diagonal_draws)
    return {
        "sample_w2_full": full,
        "sample_w2_diag": diagonal,
        "sample_w2_gap": diagonal - full,
        "sample_w2_baseline": empirical_wasserstein2(full_draws, baseline_draws),
    }
