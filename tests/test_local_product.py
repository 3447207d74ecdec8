"""Local product matrix (blog, "New tool"): Jacobian, exact fixed-pattern covariance, support."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from torch.func import jacrev

from vbnn.diagnostics.local_product import (
    MeanFieldNetwork,
    activation_pattern,
    fixed_pattern_covariance,
    local_product,
    sample_local_products,
)
from vbnn.diagnostics.product_covariance import (
    covariance_support,
    expected_support,
    flatten_covariance,
    monte_carlo_covariance,
)


def network(sizes, mean_low, mean_high, std, slope, seed=0) -> MeanFieldNetwork:
    """Means U(mean_low, mean_high) (random sign), every std ``std``."""
    generator = torch.Generator().manual_seed(seed)

    def means(*shape):
        magnitude = mean_low + (mean_high - mean_low) * torch.rand(*shape, generator=generator)
        sign = torch.where(torch.rand(*shape, generator=generator) < 0.5, -1.0, 1.0)
        return (magnitude * sign).double()

    pairs = list(pairwise(sizes))
    return MeanFieldNetwork(
        [means(i, o) for i, o in pairs],
        [torch.full((i, o), std, dtype=torch.float64) for i, o in pairs],
        [means(o) for _, o in pairs],
        [torch.full((o,), std, dtype=torch.float64) for _, o in pairs],
        slope,
    )


def test_local_product_is_the_jacobian_of_the_network() -> None:
    mean_field = network([3, 5, 4, 2], 0.2, 1.0, 0.5, slope=0.1)
    weights, biases = mean_field.sample(1, torch.Generator().manual_seed(1))
    weights, biases = [w[0] for w in weights], [b[0] for b in biases]
    x = torch.tensor([0.3, -1.2, 0.8], dtype=torch.float64)

    def f(inputs):
        hidden = inputs
        for number, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
            if number:
                hidden = torch.nn.functional.leaky_relu(hidden, 0.1)
            hidden = hidden @ weight + bias
        return hidden

    product = local_product(weights, activation_pattern(weights, biases, x, 0.1))
    torch.testing.assert_close(product, jacrev(f)(x).T)  # jacrev: (O, I); M: (I, O)


@pytest.mark.parametrize("depth", [2, 3])
def test_fixed_pattern_covariance_matches_monte_carlo_and_the_linear_support(depth: int) -> None:
    mean_field = network([3, *[3] * (depth - 1), 3], 0.3, 1.0, 0.4, slope=0.3)
    x = torch.tensor([1.0, -0.5, 0.7], dtype=torch.float64)
    exact = flatten_covariance(fixed_pattern_covariance(mean_field, x))
    assert torch.equal(covariance_support(exact), expected_support(depth, 3, 3))
    draws = sample_local_products(
        mean_field, x, 100_000, torch.Generator().manual_seed(2), fixed_pattern=True
    )
    estimate, standard_error = monte_carlo_covariance(draws)
    assert ((estimate - exact).abs() / standard_error).max() < 5


def test_three_layers_correlate_every_pair_of_local_product_entries() -> None:
    """Each draw's own pattern; a typical input: every pair's covariance is > 5 standard errors."""
    mean_field = network([2, 3, 3, 2], 0.5, 1.5, 0.5, slope=0.2, seed=3)
    x = torch.tensor([1.0, 0.5], dtype=torch.float64)
    draws = sample_local_products(mean_field, x, 100_000, torch.Generator().manual_seed(4))
    estimate, standard_error = monte_carlo_covariance(draws)
    assert (estimate.abs() / standard_error).min() > 5


def test_two_layers_keep_the_linear_pattern_when_the_pattern_cannot_flip() -> None:
    """Pre-activations > 10 stds from 0: draws' patterns equal the mean's; the pairs sharing no
    row or column stay uncorrelated (eq. 14) and the estimate matches the exact covariance."""
    mean_field = network([3, 4, 3], 1.0, 2.0, 0.02, slope=0.1, seed=5)
    x = torch.tensor([1.0, 0.5, -0.5], dtype=torch.float64)
    pre = x @ mean_field.weight_means[0] + mean_field.bias_means[0]
    spread = 0.02 * (x.pow(2).sum() + 1).sqrt()
    assert (pre.abs() / spread).min() > 10
    draws = sample_local_products(mean_field, x, 50_000, torch.Generator().manual_seed(6))
    estimate, standard_error = monte_carlo_covariance(draws)
    exact = flatten_covariance(fixed_pattern_covariance(mean_field, x))
    assert ((estimate - exact).abs() / standard_error).max() < 5
    uncorrelated = ~expected_support(2, 3, 3)
    assert (estimate[uncorrelated].abs() / standard_error[uncorrelated]).max() < 5


def test_two_layers_near_a_boundary_correlate_through_the_pattern() -> None:
    """A hidden ReLU unit at its boundary:
    Cov(M_ab, M_cd) = sum_i m^B_ib m^B_id Cov(A_ai d_i, A_ci d_i) is non-zero
    for a != c, b != d: the depth-2 pattern holds only where patterns cannot flip.

    One hidden unit, x = (1, -1), A_0, A_1 ~ N(1, 0.5^2), d = 1[U > 0] with U = A_0 - A_1 (+ a
    bias of std 1e-3): A_0 A_1 = (V^2 - U^2) / 4 with V = A_0 + A_1 independent of U gives
    E[A_0 A_1 d] = 1/2, and E[A_0 d] E[A_1 d] = (1 + c)(1 - c) / 4 with c = E[U / 2 | U > 0]
    = sd(U) / sqrt(2 pi); so Cov(M_00, M_11) = 1/2 - (1 - c^2) / 4 (means of B are 1)."""
    weight_means = [torch.tensor([[1.0], [1.0]]).double(), torch.tensor([[1.0, 1.0]]).double()]
    stds = [torch.full((2, 1), 0.5).double(), torch.full((1, 2), 0.1).double()]
    zero_bias = [torch.zeros(1).double(), torch.zeros(2).double()]
    mean_field = MeanFieldNetwork(weight_means, stds, zero_bias, [b + 1e-3 for b in zero_bias], 0.0)
    x = torch.tensor([1.0, -1.0], dtype=torch.float64)  # pre-activation mean 0: the boundary
    draws = sample_local_products(mean_field, x, 100_000, torch.Generator().manual_seed(7))
    estimate, standard_error = monte_carlo_covariance(draws)
    # entries (0, 0) and (1, 1): flat indices 0 and 3 share neither row nor column
    c = math.sqrt(0.5 + 1e-6) / math.sqrt(2 * math.pi)
    exact = 0.5 - (1 - c**2) / 4
    assert abs(estimate[0, 3] - exact) < 5 * standard_error[0, 3]
    assert estimate[0, 3] / standard_error[0, 3] > 100
    assert fixed_pattern_covariance(mean_field, x)[0, 0, 1, 1] == 0


def test_bad_input_is_named() -> None:
    mean_field = network([3, 2, 1], 0.1, 1.0, 0.1, slope=0.0)
    with pytest.raises(ValueError, match="x must have shape"):
        sample_local_products(mean_field, torch.zeros(2), 10, torch.Generator())
    with pytest.raises(ValueError, match="slope must be in"):
        MeanFieldNetwork(
            mean_field.weight_means,
            mean_field.weight_stds,
            mean_field.bias_means,
            mean_field.bias_stds,
            slope=2.0,
        )
