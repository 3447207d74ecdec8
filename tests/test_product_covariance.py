"""Product-matrix covariance of mean-field layers (Farquhar et al. 2020, eqs. 14 and 17) against
Monte Carlo."""

from __future__ import annotations

import pytest
import torch

from vbnn.diagnostics.product_covariance import (
    analytic_product_covariance,
    covariance_support,
    expected_support,
    flatten_covariance,
    monte_carlo_covariance,
    random_mean_field_layers,
    sample_products,
    three_layer_covariance,
    two_layer_covariance,
)


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_analytic_matches_monte_carlo(depth: int) -> None:
    generator = torch.Generator().manual_seed(depth)
    # larger means than the paper's so the mean-dependent terms are well above the noise
    means, stds = random_mean_field_layers(depth, 3, mean_bound=0.8, std=0.5, generator=generator)
    exact = flatten_covariance(analytic_product_covariance(means, stds))
    samples = sample_products(means, stds, 200_000, generator)
    estimate, standard_error = monte_carlo_covariance(samples)
    z = (estimate - exact).abs() / standard_error
    # 81 entries, two-sided: 5 standard errors leave a family-wise false alarm rate below 1e-4
    assert float(z.max()) < 5.0


def test_explicit_two_and_three_layer_forms_match_recursion() -> None:
    generator = torch.Generator().manual_seed(1)
    means = [
        torch.randn(3, 4, generator=generator, dtype=torch.float64),
        torch.randn(4, 2, generator=generator, dtype=torch.float64),
        torch.randn(2, 5, generator=generator, dtype=torch.float64),
    ]
    stds = [torch.rand(m.shape, generator=generator, dtype=torch.float64) + 0.1 for m in means]
    torch.testing.assert_close(
        two_layer_covariance(means[0], stds[0], means[1], stds[1]),
        analytic_product_covariance(means[:2], stds[:2]),
    )
    torch.testing.assert_close(
        three_layer_covariance(means, stds), analytic_product_covariance(means, stds)
    )


def test_two_layer_support_is_shared_row_or_column() -> None:
    generator = torch.Generator().manual_seed(2)
    means, stds = random_mean_field_layers(2, 4, generator=generator)
    support = covariance_support(analytic_product_covariance(means, stds))
    assert torch.equal(support, expected_support(2, 4, 4))
    assert not bool(support.all())  # some pairs are exactly uncorrelated


@pytest.mark.parametrize("depth", [3, 4])
def test_three_or_more_layers_correlate_every_pair(depth: int) -> None:
    generator = torch.Generator().manual_seed(3)
    means, stds = random_mean_field_layers(depth, 4, generator=generator)
    support = covariance_support(analytic_product_covariance(means, stds))
    assert bool(support.all())


def test_three_layers_with_zero_means_keep_the_two_layer_pattern() -> None:
    # the all-pairs term needs non-zero means (footnote of Farquhar et al. 2020): with zero means it
    # vanishes
    means = [torch.zeros(3, 3, dtype=torch.float64) for _ in range(3)]
    stds = [torch.full((3, 3), 0.5, dtype=torch.float64) for _ in range(3)]
    support = covariance_support(analytic_product_covariance(means, stds))
    assert torch.equal(support, expected_support(1, 3, 3))


def test_bad_shapes_raise() -> None:
    with pytest.raises(ValueError, match="inner sizes"):
        analytic_product_covariance(
            [torch.zeros(2, 3), torch.zeros(2, 2)], [torch.ones(2, 3), torch.ones(2, 2)]
        )
    with pytest.raises(ValueError, match="as many means"):
        analytic_product_covariance([torch.zeros(2, 2)], [])
