"""Rank-normalised split R-hat and bulk / tail ESS (Vehtari et al. 2021) on known cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pyro.ops.stats import effective_sample_size

from vbnn.references.chain_diagnostics import (
    ConvergenceCriterion,
    _ess,
    bulk_ess,
    max_abs_normal_quantile,
    moment_agreement,
    rank_rhat,
    split_chains,
    summarise_chains,
    tail_ess,
)


def ar1(chains: int, samples: int, rho: float, seed: int) -> np.ndarray:
    """Stationary AR(1): x_t = rho x_(t-1) + sqrt(1 - rho^2) e_t, ESS = S (1 - rho) / (1 + rho)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((chains, samples))
    x = np.empty((chains, samples))
    x[:, 0] = noise[:, 0]
    for t in range(1, samples):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * noise[:, t]
    return x


def test_independent_draws_have_rhat_one_and_ess_the_draw_count() -> None:
    draws = np.random.default_rng(0).standard_normal((4, 1000, 50))
    rhat, bulk, tail = rank_rhat(draws), bulk_ess(draws), tail_ess(draws)
    assert np.all(rhat < 1.01)
    # the ESS estimate of independent draws scatters by ~10 % around S = 4000
    assert abs(np.median(bulk) / 4000 - 1) < 0.05 and np.all(np.abs(bulk / 4000 - 1) < 0.3)
    assert abs(np.median(tail) / 4000 - 1) < 0.1


@pytest.mark.parametrize("rho", [0.5, 0.9])
def test_ar1_chains_have_the_known_ess(rho: float) -> None:
    draws = np.stack([ar1(4, 4000, rho, seed) for seed in range(20)], axis=-1)
    expected = 4 * 4000 * (1 - rho) / (1 + rho)
    assert np.median(bulk_ess(draws)) == pytest.approx(expected, rel=0.1)
    assert np.all(rank_rhat(draws) < 1.02)


@pytest.mark.parametrize("samples", [601, 600])
def test_the_ess_is_pyros_own(samples: int) -> None:
    """``_ess`` is Pyro's estimator with another running minimum of the paired autocorrelations:
    the ESS equals Pyro's ``effective_sample_size`` on chains whose pairs rise and fall (AR(1)
    of rho 0.9 and -0.5, a chain stuck for a while, odd and even draw counts), and on one
    chain."""
    rng = np.random.default_rng(samples)
    stuck = np.repeat(rng.standard_normal((3, samples // 20)), 20, axis=1)[:, :samples]
    stuck = np.pad(stuck, ((0, 0), (0, samples - stuck.shape[1])), mode="edge")
    draws = np.stack([ar1(3, samples, 0.9, 1), ar1(3, samples, -0.5, 2), stuck], axis=-1)
    pyro_own = effective_sample_size(torch.as_tensor(draws), 0, 1).numpy()
    np.testing.assert_allclose(_ess(draws, coordinates=2), pyro_own, rtol=1e-12)
    assert pyro_own[1] > 3 * samples  # anticorrelated draws: more than independent ones
    one_chain = effective_sample_size(torch.as_tensor(draws[:1]), 0, 1).numpy()
    np.testing.assert_allclose(_ess(draws[:1]), one_chain, rtol=1e-12)


def test_rhat_sees_a_shifted_chain_and_the_folded_part_a_wider_one() -> None:
    rng = np.random.default_rng(1)
    shifted = rng.standard_normal((4, 500, 1))
    shifted[0] += 2.0
    assert rank_rhat(shifted)[0] > 1.2
    wider = rng.standard_normal((4, 500, 1))
    wider[0] *= 3.0  # same location: only the folded (scale) R-hat sees it
    assert rank_rhat(wider)[0] > 1.05
    draws_alone = ConvergenceCriterion(max_divergences=None)
    assert draws_alone.passes(summarise_chains(shifted, shifted[..., 0])) is False


def test_divergences_fail_chains_that_otherwise_mix() -> None:
    mixed = np.random.default_rng(2).standard_normal((4, 1000, 2))
    summary = summarise_chains(mixed, mixed[..., 0])
    assert ConvergenceCriterion(max_divergences=None).passes(summary)
    assert ConvergenceCriterion().passes({**summary, "divergences": 0})
    assert not ConvergenceCriterion().passes({**summary, "divergences": 1})
    assert ConvergenceCriterion(max_divergences=5).passes({**summary, "divergences": 5})
    with pytest.raises(ValueError, match="divergences"):
        ConvergenceCriterion().passes(summary)  # the sampler's count is missing


def test_an_unadjusted_sampler_with_large_energy_errors_is_not_trusted() -> None:
    """R-hat and ESS cannot see an unadjusted sampler's bias; its energy error can."""
    mixed = np.random.default_rng(3).standard_normal((4, 1000, 2))
    summary = {**summarise_chains(mixed, mixed[..., 0]), "divergences": 0}
    assert ConvergenceCriterion().passes(summary)  # NUTS, MAMS: no energy entry
    tuned = {**summary, "chain_energy_error_variance_per_dimension": [4e-4, 6e-4, 5e-4, 5e-3]}
    assert ConvergenceCriterion().passes(tuned)
    one_chain_off = {**tuned, "chain_energy_error_variance_per_dimension": [4e-4, 6e-4, 0.1, 5e-4]}
    assert not ConvergenceCriterion().passes(one_chain_off)
    assert ConvergenceCriterion(max_energy_error_variance=None).passes(one_chain_off)


def test_split_chains_halves_and_drops_the_middle_of_an_odd_chain() -> None:
    draws = np.arange(2 * 9).reshape(2, 9)
    split = split_chains(draws)
    assert split.shape == (4, 4)
    np.testing.assert_array_equal(split[0], [0, 1, 2, 3])
    np.testing.assert_array_equal(split[2], [5, 6, 7, 8])
    with pytest.raises(ValueError, match="draws must be"):
        split_chains(np.zeros((2, 3)))


def ar1_coordinates(shape: tuple[int, int, int], rho: float, seed: int) -> np.ndarray:
    """(C, N, D) stationary AR(1) chains, every coordinate on its own."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(shape)
    x = np.empty(shape)
    x[:, 0] = noise[:, 0]
    for t in range(1, shape[1]):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * noise[:, t]
    return x


def test_moment_agreement_z_are_standard_normal_for_two_runs_of_one_target() -> None:
    """AR(1) chains with rho 0.6 are worth a quarter of their draws: without the ESS the z would
    scatter twice as wide (sd 2), with it their sd over 400 coordinates is 1 (+- 0.07)."""
    first = ar1_coordinates((4, 2000, 400), 0.6, seed=1)
    agreement = moment_agreement(first, ar1_coordinates((4, 2000, 400), 0.6, seed=2))
    assert np.std(agreement.mean_z) == pytest.approx(1.0, abs=0.15)
    assert np.std(agreement.variance_z) == pytest.approx(1.0, abs=0.15)
    assert abs(np.mean(agreement.mean_z)) < 0.15
    assert np.max(np.abs(agreement.mean_z)) < max_abs_normal_quantile(400, 0.99)
    assert np.median(agreement.variance_ratio) == pytest.approx(1.0, abs=0.01)


def test_moment_agreement_finds_a_shifted_mean_and_a_wider_coordinate() -> None:
    first = ar1_coordinates((4, 2000, 20), 0.6, seed=3)
    second = ar1_coordinates((4, 2000, 20), 0.6, seed=4)
    # the mean's standard error is sqrt(2 / ESS), ESS = 8000 / 4: 0.032; shift by 8 of them
    second[..., 0] += 8 * np.sqrt(2 / 2000)
    second[..., 1] *= 1.4
    agreement = moment_agreement(first, second)
    assert agreement.mean_z[0] < -5 and np.argmax(np.abs(agreement.mean_z)) == 0
    assert agreement.variance_z[1] < -10 and np.argmax(np.abs(agreement.variance_z)) == 1
    assert agreement.variance_ratio[1] == pytest.approx(1.96, rel=0.1)
    assert np.all(np.abs(agreement.variance_z[2:]) < max_abs_normal_quantile(18, 0.999))


def test_max_abs_normal_quantile_against_its_closed_form_and_simulation() -> None:
    assert max_abs_normal_quantile(1, 0.5) == pytest.approx(0.6745, abs=1e-4)
    largest = np.abs(np.random.default_rng(5).standard_normal((4000, 900))).max(axis=1)
    for probability in (0.5, 0.95):
        assert max_abs_normal_quantile(900, probability) == pytest.approx(
            np.quantile(largest, probability), abs=0.05
        )
    with pytest.raises(ValueError, match="count >= 1"):
        max_abs_normal_quantile(0, 0.5)


def test_chains_with_no_defined_rank_statistic_summarise_as_failing_without_a_warning() -> None:
    # constant draws (a stuck sampler, or chains too short): every coordinate's R-hat and ESS is
    # undefined; the summary fails the criterion and says NaN, without numpy's All-NaN warning
    # (an error under the suite's filterwarnings)
    stuck = np.ones((2, 20, 3))
    summary = summarise_chains(stuck, np.random.default_rng(4).standard_normal((2, 20)))
    assert summary["rhat_max"] == np.inf and summary["bulk_ess_min"] == 0.0
    assert np.isnan(summary["rhat_median"]) and np.isnan(summary["bulk_ess_median"])
    partly = np.random.default_rng(5).standard_normal((2, 200, 2))
    partly[..., 1] = 1.0  # one coordinate constant: the median is the other's
    summary = summarise_chains(partly, partly[..., 0])
    assert summary["rhat_median"] == pytest.approx(rank_rhat(partly[..., :1])[0])
