"""Fidelity to a reference predictive: agreement, total variation and 1-D Wasserstein distances."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vbnn.references.fidelity import (
    agreement,
    empirical_wasserstein_1d,
    gaussian_predictive_wasserstein,
    predictive_wasserstein,
    total_variation,
)


def _simplex(rows: int, classes: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(
        2 * torch.randn(rows, classes, generator=generator, dtype=torch.float64), -1
    )


def test_a_predictive_against_itself() -> None:
    p = _simplex(50, 4, 0)
    assert agreement(p, p) == 1.0 and total_variation(p, p) == 0.0


def test_hand_example() -> None:
    """Rows: (0.5, 0.5, 0) against (0.2, 0.3, 0.5), TV 0.5, argmax 0 vs 2; (1, 0, 0) against
    (0, 0, 1), TV 1 (disjoint); (0.1, 0.6, 0.3) against (0.2, 0.7, 0.1), TV 0.2, both 1."""
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.1, 0.6, 0.3]], dtype=torch.float64)
    q = torch.tensor([[0.2, 0.3, 0.5], [0.0, 0.0, 1.0], [0.2, 0.7, 0.1]], dtype=torch.float64)
    torch.testing.assert_close(total_variation(p, q), torch.tensor(1.7 / 3, dtype=torch.float64))
    torch.testing.assert_close(agreement(p, q), torch.tensor(1 / 3, dtype=torch.float64))


def test_total_variation_bounds() -> None:
    """0 <= TV <= 1, TV = 1 - sum min(p, q) per input, and Pinsker: TV <= sqrt(KL(p || q) / 2);
    disagreeing on the argmax needs TV > 0."""
    p, q = _simplex(200, 5, 1), _simplex(200, 5, 2)
    for n in range(len(p)):
        tv = total_variation(p[n : n + 1], q[n : n + 1])
        torch.testing.assert_close(tv, 1 - torch.minimum(p[n], q[n]).sum())
        kl = (p[n] * (p[n] / q[n]).log()).sum()
        assert 0 <= tv <= min(1.0, math.sqrt(kl / 2)) + 1e-12
    assert 0 < total_variation(p, q) < 1 and agreement(p, q) < 1


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match=r"probabilities \(3, 4\) and reference \(3, 5\)"):
        total_variation(_simplex(3, 4, 0), _simplex(3, 5, 0))
    with pytest.raises(ValueError, match="rows must sum to 1"):
        agreement(torch.full((2, 2), 0.4, dtype=torch.float64), _simplex(2, 2, 0))


def test_wasserstein_of_identical_and_permuted_sets_is_zero() -> None:
    samples = torch.randn(6, 100, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    shuffled = samples[:, torch.randperm(100, generator=torch.Generator().manual_seed(1))]
    for order in (1, 2, 3):
        assert torch.equal(
            empirical_wasserstein_1d(samples, shuffled, order), torch.zeros(6).double()
        )
    doubled = samples.repeat(1, 2)  # the same empirical distribution with 200 samples
    assert empirical_wasserstein_1d(samples, doubled).abs().max() == 0.0


def test_wasserstein_equal_sizes_match_sorted_samples_and_order_one_is_scipys() -> None:
    """S = R: (mean |x_(i) - y_(i)|^p)^(1/p). S != R, order 1: scipy.stats.wasserstein_distance,
    the function the competition's scoring script calls."""
    from scipy.stats import wasserstein_distance

    generator = torch.Generator().manual_seed(2)
    x = torch.randn(4, 30, generator=generator, dtype=torch.float64)
    y = 1.5 * torch.randn(4, 30, generator=generator, dtype=torch.float64) + 0.3
    gaps = (x.sort(-1).values - y.sort(-1).values).abs()
    torch.testing.assert_close(empirical_wasserstein_1d(x, y), (gaps**2).mean(-1).sqrt())
    z = torch.rand(4, 17, generator=generator, dtype=torch.float64)
    expected = [wasserstein_distance(a, b) for a, b in zip(x.numpy(), z.numpy(), strict=True)]
    torch.testing.assert_close(empirical_wasserstein_1d(x, z, order=1), torch.tensor(expected))
    torch.testing.assert_close(
        predictive_wasserstein(x, z, order=1), torch.tensor(np.mean(expected), dtype=torch.float64)
    )


def test_sample_w2_of_two_gaussians_matches_the_closed_form() -> None:
    """W2(N(0, 1), N(1, 2^2)) = sqrt(1 + 1). From 2000 samples of each at 40 inputs, the mean of
    the per-input estimates is within 5 standard errors (their spread over inputs) of it; the
    estimator's bias, of order log log S / S in W2^2, is about 1e-3 here,
    a fifth of one standard error."""
    generator = torch.Generator().manual_seed(3)
    inputs, count = 40, 2000
    x = torch.randn(inputs, count, generator=generator, dtype=torch.float64)
    y = 1.0 + 2.0 * torch.randn(inputs, count, generator=generator, dtype=torch.float64)
    estimates = empirical_wasserstein_1d(x, y)
    exact = gaussian_predictive_wasserstein(
        torch.zeros(inputs).double(),
        torch.ones(inputs).double(),
        torch.ones(inputs).double(),
        torch.full((inputs,), 2.0).double(),
    )
    torch.testing.assert_close(exact, torch.tensor(math.sqrt(2.0), dtype=torch.float64))
    standard_error = estimates.std() / math.sqrt(inputs)
    assert abs(estimates.mean() - exact) < 5 * standard_error


def test_gaussian_closed_form_is_the_multivariate_one_in_one_dimension() -> None:
    from vbnn.references.gaussian_gap import wasserstein2_gaussian

    mean, std = torch.tensor([0.3, -1.0]).double(), torch.tensor([0.5, 2.0]).double()
    other_mean, other_std = torch.tensor([1.0, 0.0]).double(), torch.tensor([1.5, 0.1]).double()
    expected = np.mean(
        [
            wasserstein2_gaussian(
                np.array([m]), np.array([[s**2]]), np.array([n]), np.array([[t**2]])
            )
            for m, s, n, t in zip(mean, std, other_mean, other_std, strict=True)
        ]
    )
    torch.testing.assert_close(
        gaussian_predictive_wasserstein(mean, std, other_mean, other_std),
        torch.tensor(expected, dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="std and reference_std must be positive"):
        gaussian_predictive_wasserstein(mean, -std, other_mean, other_std)
