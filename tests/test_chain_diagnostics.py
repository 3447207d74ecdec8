"""Rank-normalised split R-hat and bulk / tail ESS (Vehtari et al. 2021) on known cases."""

from __future__ import annotations

import numpy as np
import pytest

from vbnn.references.chain_diagnostics import (
    ConvergenceCriterion,
    bulk_ess,
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
