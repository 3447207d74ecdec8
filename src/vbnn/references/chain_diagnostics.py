"""Convergence of several MCMC chains: rank-normalised split R-hat, bulk and tail ESS.

Vehtari, Gelman, Simpson, Carpenter & Buerkner (2021), "Rank-normalization, folding, and
localization: an improved R-hat for assessing convergence of MCMC" (the estimators of Stan and
ArviZ). For draws theta (C chains, N draws) of one coordinate:

* split every chain in two halves: 2C chains of floor(N / 2) draws (the middle draw of an odd N
  is dropped);
* rank-normalise: z = Phi^-1((r - 3/8) / (S + 1/4)), r the rank of a draw among all S = 2C N/2
  draws (ties get their average rank);
* R-hat_bulk = R-hat(z), R-hat_folded = R-hat(rank-normalised |theta - median(theta)|),
  **R-hat = max(R-hat_bulk, R-hat_folded)**, where R-hat(.) = sqrt(var+ / W) is the classic
  potential scale reduction (Pyro's ``gelman_rubin``: W the mean within-chain variance,
  var+ = (n - 1) / n W + B / n);
* **bulk ESS** = ESS(z); **tail ESS** = min(ESS(1[theta <= q_05]), ESS(1[theta <= q_95])), where
  ESS(.) is Geyer's initial monotone sequence estimator over chains (Pyro's
  ``effective_sample_size``, the Stan reference manual's formula; :func:`_geyer_ess`).

Two sets of chains of one target (two samplers, two settings of one) are compared moment by
moment with :func:`moment_agreement`: differences of means and of variances in Monte Carlo
standard errors, with the ESS of each set (Stan's MCSE of a mean; the variance as the mean of the
squared deviations).

``tests/test_chain_diagnostics.py`` checks them on independent draws (ESS ~ S, R-hat ~ 1), on AR(1)
chains (ESS = S (1 - rho) / (1 + rho)), and that R-hat catches chains that differ in location or
only in scale (the folded part).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import ndtri
from scipy.stats import norm, rankdata

try:
    from pyro.ops.stats import autocovariance, gelman_rubin
except ImportError as error:  # an optional dependency: name the extra that brings it
    raise ImportError(
        f"vbnn.references.chain_diagnostics uses Pyro's ESS and R-hat ({error}): "
        "pip install 'vbnn[nuts]' (or 'vbnn[jax]', which includes it)"
    ) from error


def split_chains(draws: np.ndarray) -> np.ndarray:
    """(C, N, ...) -> (2C, N // 2, ...): each chain's first and second halves as two chains."""
    if draws.ndim < 2 or draws.shape[1] < 4:
        raise ValueError(
            f"split_chains: draws must be (chains, >= 4 draws, ...), got {draws.shape}"
        )
    half = draws.shape[1] // 2
    return np.concatenate([draws[:, :half], draws[:, -half:]], axis=0)


def rank_normalise(draws: np.ndarray) -> np.ndarray:
    """Normal scores of the pooled ranks of (C, N, ...) draws, per trailing coordinate."""
    chains, samples = draws.shape[:2]
    flat = draws.reshape(chains * samples, -1)
    ranks = rankdata(flat, axis=0)
    # ndtri is the standard normal quantile that norm.ppf calls, without its argument checks
    return ndtri((ranks - 0.375) / (len(flat) + 0.25)).reshape(draws.shape)


def _rhat(draws: np.ndarray) -> np.ndarray:
    return gelman_rubin(torch.as_tensor(draws, dtype=torch.float64), 0, 1).numpy()


def _geyer_ess(draws: torch.Tensor) -> torch.Tensor:
    """ESS of (C, N, K) draws -> (K,): Geyer's initial monotone sequence estimator over chains
    (Geyer 1992; the Stan reference manual's formula), the computation of Pyro's
    ``effective_sample_size`` step by step on its public ``autocovariance``, with the running
    minimum taken by ``torch.cummin`` (Pyro's builds an (N/2) x (N/2) copy per coordinate).

    With W the mean within-chain variance and var+ = (N - 1) / N W + B (B the variance of the
    chain means; var+ = (N - 1) / N W and W = var+ for one chain), the autocorrelation at lag t
    is rho_t = 1 - (W - mean_c gamma_{t,c}) / var+ (rho_0 = 1), its pairs are
    P_k = rho_2k + rho_2k+1, and tau = -1 + 2 P_0 + 2 sum_{k >= 1} min_{j <= k} max(P_j, 0);
    ESS = C N / tau."""
    chains, samples = draws.shape[:2]
    by_draw = draws.transpose(0, 1)  # (N, C, K)
    within = by_draw.var(dim=0).mean(dim=0)
    pooled = (samples - 1) / samples * within
    if chains > 1:
        pooled = pooled + by_draw.mean(dim=0).var(dim=0)
    else:
        within = pooled  # then rho_t is the chain's own autocorrelation
    rho = (pooled - within + autocovariance(by_draw, dim=0).mean(dim=1)) / pooled
    rho[0] = 1
    rho = rho if samples % 2 == 0 else rho[:-1]
    pairs = rho.reshape(samples // 2, 2, *rho.shape[1:]).sum(dim=1)
    tau = -1 + 2 * pairs[0]
    if len(pairs) > 1:
        tau = tau + 2 * torch.cummin(pairs[1:].clamp(min=0), dim=0).values.sum(dim=0)
    return chains * samples / tau


def _ess(draws: np.ndarray, coordinates: int = 64) -> np.ndarray:
    """:func:`_geyer_ess` a few ``coordinates`` at a time: on all at once its FFTs hold ~100
    copies of the draws (20 GB for 8 chains x 3000 draws x 1000 coordinates). It equals Pyro's
    ``effective_sample_size`` (``tests/test_chain_diagnostics.py``)."""
    flat = np.asarray(draws, dtype=np.float64).reshape(*draws.shape[:2], -1)
    pieces = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for begin in range(0, flat.shape[-1], coordinates):
            pieces.append(_geyer_ess(torch.as_tensor(flat[..., begin : begin + coordinates])))
    ess = torch.cat(pieces).numpy().reshape(draws.shape[2:])
    return np.where(np.isfinite(ess), ess, np.nan)


def rank_rhat(draws: np.ndarray) -> np.ndarray:
    """max(bulk, folded) rank-normalised split R-hat of (C, N, ...) draws -> (...)."""
    split = split_chains(np.asarray(draws, dtype=np.float64))
    folded = np.abs(split - np.median(split.reshape(-1, *split.shape[2:]), axis=0))
    return np.maximum(_rhat(rank_normalise(split)), _rhat(rank_normalise(folded)))


def bulk_ess(draws: np.ndarray) -> np.ndarray:
    """ESS of the rank-normalised split chains of (C, N, ...) draws -> (...)."""
    return _ess(rank_normalise(split_chains(np.asarray(draws, dtype=np.float64))))


def tail_ess(draws: np.ndarray) -> np.ndarray:
    """min over the 5 % and 95 % quantiles of the ESS of 1[theta <= q] -> (...)."""
    split = split_chains(np.asarray(draws, dtype=np.float64))
    pooled = split.reshape(-1, *split.shape[2:])
    values = [
        _ess((split <= np.quantile(pooled, q, axis=0)).astype(np.float64)) for q in (0.05, 0.95)
    ]
    return np.minimum(*values)


# unadjusted MCLMC: the largest energy error variance per dimension a trusted chain may show,
# ten times the 5e-4 its step size is tuned for
ENERGY_ERROR_LIMIT = 5e-3


@dataclass(frozen=True)
class ConvergenceCriterion:
    """When the chains of a unit are trusted (Vehtari et al. 2021 recommend R-hat < 1.01 and
    ESS > 100 per coordinate; these defaults are looser on R-hat, see the depth README).

    Attributes:
        max_rhat: every coordinate's rank-normalised R-hat at most this.
        min_bulk_ess: every coordinate's bulk ESS at least this.
        min_tail_ess: every coordinate's tail ESS at least this.
        max_divergences: divergent transitions among the kept samples of all chains at most
            this (a divergence means the sampler missed part of the posterior, so its draws are
            biased however well the chains agree); None judges the draws alone.
        max_energy_error_variance: for a sampler without a Metropolis test (unadjusted MCLMC,
            whose summary has ``chain_energy_error_variance_per_dimension``): every chain's
            mean squared energy error per step and dimension while sampling at most this. Its
            bias grows with that variance (Robnik & Seljak 2024), which R-hat and ESS cannot
            see; the step size is tuned for 5e-4, and the default allows ten times that. None,
            or a summary without the entry (NUTS, MAMS), leaves it out.
    """

    max_rhat: float = 1.05
    min_bulk_ess: float = 100.0
    min_tail_ess: float = 100.0
    max_divergences: int | None = 0
    max_energy_error_variance: float | None = ENERGY_ERROR_LIMIT

    def passes(self, summary: dict[str, float]) -> bool:
        """``summary`` as returned by :func:`summarise_chains`, with the sampler's
        ``divergences`` unless ``max_divergences`` is None (and, from unadjusted MCLMC, its
        ``chain_energy_error_variance_per_dimension``, one value a chain)."""
        if self.max_divergences is not None and "divergences" not in summary:
            raise ValueError(
                "ConvergenceCriterion.passes: the summary has no 'divergences' (the sampler's "
                "count); add it, or set max_divergences=None to judge the draws alone"
            )
        energy = summary.get("chain_energy_error_variance_per_dimension")
        return bool(
            summary["rhat_max"] <= self.max_rhat
            and summary["bulk_ess_min"] >= self.min_bulk_ess
            and summary["tail_ess_min"] >= self.min_tail_ess
            and (self.max_divergences is None or summary["divergences"] <= self.max_divergences)
            and (
                self.max_energy_error_variance is None
                or energy is None
                or bool(np.max(energy) <= self.max_energy_error_variance)
            )
        )


@dataclass(frozen=True)
class MomentAgreement:
    """Per coordinate, how far two sets of chains of one target are apart in mean and
    variance, in standard errors (:func:`moment_agreement`).

    Attributes:
        mean_z: (mean_a - mean_b) / sqrt(var_a / ESS_a + var_b / ESS_b).
        variance_z: (s2_a - s2_b) / sqrt(se_a^2 + se_b^2), se^2 = Var[(x - mean)^2] /
            ESS[(x - mean)^2]: the variance is the mean of the squared deviations.
        variance_ratio: s2_b / s2_a.
    """

    mean_z: np.ndarray
    variance_z: np.ndarray
    variance_ratio: np.ndarray


def _mean_and_error(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean over chains and draws of (C, N, ...) and its squared Monte Carlo standard error,
    var / ESS with the ESS of the (unranked) split chains, as Stan's MCSE of a mean (NaN where
    the ESS is not positive: too few draws to estimate it)."""
    pooled = draws.reshape(-1, *draws.shape[2:])
    ess = _ess(split_chains(draws))
    with np.errstate(invalid="ignore", divide="ignore"):
        return pooled.mean(0), np.where(ess > 0, pooled.var(0) / ess, np.nan)


def moment_agreement(first: np.ndarray, second: np.ndarray) -> MomentAgreement:
    """Do two samplers (or two runs of one) give the same means and variances? Both (C, N, ...)
    draws of the same target; the chains' autocorrelation enters through the ESS, so where the
    two agree every z is close to N(0, 1) and the largest |z| over K coordinates stays near
    :func:`max_abs_normal_quantile` (K, 0.5); a bias of either shows as |z| beyond it. A
    coordinate whose ESS cannot be estimated (too few draws) gets NaN."""
    first, second = (np.asarray(d, dtype=np.float64) for d in (first, second))
    if first.ndim < 2 or first.shape[2:] != second.shape[2:]:
        raise ValueError(
            "moment_agreement: draws must be (chains, draws, ...) with the same trailing "
            f"shape, got {first.shape} and {second.shape}"
        )
    (mean_a, error_a), (mean_b, error_b) = _mean_and_error(first), _mean_and_error(second)
    squares = [(d - d.reshape(-1, *d.shape[2:]).mean(0)) ** 2 for d in (first, second)]
    (variance_a, variance_error_a), (variance_b, variance_error_b) = map(_mean_and_error, squares)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN errors stay NaN
        return MomentAgreement(
            mean_z=(mean_a - mean_b) / np.sqrt(error_a + error_b),
            variance_z=(variance_a - variance_b) / np.sqrt(variance_error_a + variance_error_b),
            variance_ratio=variance_b / variance_a,
        )


def max_abs_normal_quantile(count: int, probability: float) -> float:
    """The ``probability`` quantile of the largest |z| of ``count`` independent N(0, 1):
    P(max |z| <= x) = (2 Phi(x) - 1)^count."""
    if count < 1 or not 0 < probability < 1:
        raise ValueError(
            f"max_abs_normal_quantile: need count >= 1 and 0 < probability < 1, got {count}, "
            f"{probability}"
        )
    return float(norm.ppf((1 + probability ** (1 / count)) / 2))


def _worst(values: np.ndarray, pick, undefined: float) -> float:
    """``pick`` over coordinates; ``undefined`` (a failing value) if any is NaN (a coordinate
    whose draws, or indicator, are constant: no variance to estimate from)."""
    return undefined if np.isnan(values).any() else float(pick(values))


def _median(values: np.ndarray) -> float:
    """The median over the coordinates where it is defined; NaN (without numpy's All-NaN
    warning) when it is defined for none, e.g. chains too short for any rank estimate."""
    defined = values[~np.isnan(values)]
    return float(np.median(defined)) if defined.size else float("nan")


def summarise_chains(draws: np.ndarray, log_density: np.ndarray) -> dict[str, float]:
    """Worst and median R-hat, bulk and tail ESS over coordinates, and those of the log density.

    Args:
        draws: (C, N, D) samples of C chains; log_density: (C, N).
    """
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 3 or draws.shape[0] < 2:
        raise ValueError(f"summarise_chains: draws must be (chains >= 2, N, D), got {draws.shape}")
    rhat, bulk, tail = rank_rhat(draws), bulk_ess(draws), tail_ess(draws)
    density = np.asarray(log_density, dtype=np.float64)[..., None]
    return {
        "rhat_max": _worst(rhat, np.max, np.inf),
        "rhat_median": _median(rhat),
        "bulk_ess_min": _worst(bulk, np.min, 0.0),
        "bulk_ess_median": _median(bulk),
        "tail_ess_min": _worst(tail, np.min, 0.0),
        "rhat_log_density": float(rank_rhat(density)[0]),
        "bulk_ess_log_density": float(bulk_ess(density)[0]),
    }
