"""Every registered family obeys one contract; families checked against each other."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from vbnn.core.contracts import ForwardMode, VariationalLayer
from vbnn.core.gaussian import kl_diagonal_gaussian, local_reparameterization_moments
from vbnn.core.randomness import ModelGenerators
from vbnn.layers import FAMILIES, FullCovarianceLinear, MeanFieldLinear, PointLinear
from vbnn.priors.gaussian import GaussianPrior

MODELS, ROWS, INPUTS, OUTPUTS = 3, 5, 4, 2


def make(name: str, std: float = 0.3) -> torch.nn.Module:
    layer = FAMILIES[name](
        INPUTS, OUTPUTS, ModelGenerators([1, 2, 3]), posterior_std=std, dtype=torch.float64
    )
    if isinstance(layer, FullCovarianceLinear):  # a genuinely correlated posterior
        with torch.no_grad():
            layer.scale_lower.copy_(0.05 * torch.randn_like(layer.scale_lower).tril(-1))
    return layer


def inputs() -> torch.Tensor:
    return torch.randn(MODELS, ROWS, INPUTS, dtype=torch.float64)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_satisfies_protocol_and_shapes(name: str) -> None:
    layer = make(name)
    assert isinstance(layer, VariationalLayer)
    x = inputs()
    generators = ModelGenerators([7, 8, 9])
    for mode in ForwardMode:
        assert layer(x, mode, generators).shape == (MODELS, ROWS, OUTPUTS)
    weight_mean, bias_mean = layer.posterior_mean()
    weight_std, bias_std = layer.posterior_std()
    assert weight_mean.shape == weight_std.shape == (MODELS, INPUTS, OUTPUTS)
    assert bias_mean.shape == bias_std.shape == (MODELS, OUTPUTS)
    assert torch.all(weight_std > 0)
    assert layer.kl(GaussianPrior(1.0)).shape == (MODELS,)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_mean_mode_uses_posterior_means(name: str) -> None:
    layer = make(name)
    x = inputs()
    weight, bias = layer.posterior_mean()
    torch.testing.assert_close(layer(x, ForwardMode.MEAN), x @ weight + bias.unsqueeze(1))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_sample_moments_match_explicit_weight_samples(name: str) -> None:
    """SAMPLE (LRT where it applies) and WEIGHTS draw from the same per-example marginal."""
    layer = make(name)
    x = inputs()[:, :2]
    draws = 20_000
    generators = ModelGenerators([11, 12, 13])
    with torch.no_grad():
        sampled = torch.stack([layer(x, ForwardMode.SAMPLE, generators) for _ in range(draws)])
        weights = torch.stack([layer(x, ForwardMode.WEIGHTS, generators) for _ in range(draws)])
    mean_gap = (sampled.mean(0) - weights.mean(0)).abs()
    pooled_var = 0.5 * (sampled.var(0) + weights.var(0))
    assert torch.all(mean_gap < 5 * (2 * pooled_var / draws).sqrt())
    assert torch.all(
        (sampled.var(0) - weights.var(0)).abs() < 5 * pooled_var * math.sqrt(4 / draws)
    )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_kl_is_non_negative_and_differentiable(name: str) -> None:
    layer = make(name)
    kl = layer.kl(GaussianPrior(0.7))
    assert torch.all(kl > 0)
    kl.sum().backward()
    # point parameters (the variance-network families' biases) are not distributions: no KL
    point = set(getattr(layer, "point_parameter_names", ()))
    assert all(p.grad is not None for n, p in layer.named_parameters() if n not in point)
    assert all(p.grad is None for n, p in layer.named_parameters() if n in point)


def test_full_covariance_samples_match_its_exact_output_moments() -> None:
    layer = make("fc")
    x = inputs()[:, :2]
    draws = 20_000
    generators = ModelGenerators([21, 22, 23])
    with torch.no_grad():
        sampled = torch.stack([layer(x, ForwardMode.SAMPLE, generators) for _ in range(draws)])
        mean, var = layer.output_moments(x)
    assert torch.all((sampled.mean(0) - mean).abs() < 5 * (var / draws).sqrt())
    assert torch.all((sampled.var(0) - var).abs() < 5 * var * math.sqrt(2 / draws))


def test_diagonal_families_kl_is_the_closed_form_of_their_marginals() -> None:
    for name in ("mf", "gd"):
        layer = make(name)
        prior = GaussianPrior(0.7)
        (weight_mean, bias_mean), (weight_std, bias_std) = (
            layer.posterior_mean(),
            layer.posterior_std(),
        )
        expected = kl_diagonal_gaussian(weight_mean, weight_std, 0.7) + kl_diagonal_gaussian(
            bias_mean, bias_std, 0.7
        )
        torch.testing.assert_close(layer.kl(prior), expected)


def test_full_covariance_kl_matches_torch_distributions() -> None:
    layer = make("fc")
    expected = torch.stack(
        [
            kl_divergence(
                MultivariateNormal(layer.mean[m].flatten(), scale_tril=layer.scale_tril()[m]),
                MultivariateNormal(
                    torch.zeros(layer.dim, dtype=torch.float64), 0.49 * torch.eye(layer.dim)
                ),
            )
            for m in range(MODELS)
        ]
    )
    torch.testing.assert_close(layer.kl(GaussianPrior(0.7)), expected.detach())


def test_full_covariance_restricted_to_a_diagonal_equals_mean_field() -> None:
    """FC with L = diag(sigma) has MF's KL, output moments and (same noise) weight samples."""
    generators = ModelGenerators([5, 6, 7])
    mean_field = MeanFieldLinear(INPUTS, OUTPUTS, generators, 0.2, torch.float64)
    full = FullCovarianceLinear(INPUTS, OUTPUTS, ModelGenerators([5, 6, 7]), 0.2, torch.float64)
    with torch.no_grad():
        mean_field.weight_log_std.uniform_(-2.0, 0.0)
        mean_field.bias_log_std.uniform_(-2.0, 0.0)
        torch.testing.assert_close(full.mean[:, :-1], mean_field.weight_mean)
        log_std = torch.cat([mean_field.weight_log_std, mean_field.bias_log_std.unsqueeze(1)], 1)
        full.scale_log_diagonal.copy_(log_std.flatten(1))
    prior = GaussianPrior(1.5)
    torch.testing.assert_close(full.kl(prior), mean_field.kl(prior))
    x = inputs()
    weight_std, bias_std = mean_field.posterior_std()
    expected = local_reparameterization_moments(
        x, mean_field.weight_mean, weight_std**2, mean_field.bias_mean, bias_std**2
    )
    for got, want in zip(full.output_moments(x), expected, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(
        full(x, ForwardMode.WEIGHTS, ModelGenerators([1, 2, 3])),
        mean_field(x, ForwardMode.WEIGHTS, ModelGenerators([1, 2, 3])),
    )


def test_mean_field_with_vanishing_std_is_the_point_network() -> None:
    mean_field = MeanFieldLinear(INPUTS, OUTPUTS, ModelGenerators([4, 5, 6]), 1e-12, torch.float64)
    point = PointLinear(INPUTS, OUTPUTS, ModelGenerators([4, 5, 6]), dtype=torch.float64)
    x = inputs()
    for mode in ForwardMode:
        torch.testing.assert_close(
            mean_field(x, mode, ModelGenerators([1, 2, 3])), point(x), atol=1e-9, rtol=0
        )


def test_wrong_input_shape_is_named() -> None:
    layer = make("mf")
    with pytest.raises(ValueError, match=r"expected \(M=3, N, 4\)"):
        layer(torch.randn(3, 5, 7, dtype=torch.float64), ForwardMode.MEAN)


def test_sampling_without_generators_is_an_error() -> None:
    with pytest.raises(ValueError, match="pass a ModelGenerators"):
        make("mf")(inputs(), ForwardMode.SAMPLE, None)


def test_point_layer_has_no_kl() -> None:
    with pytest.raises(TypeError, match="log_prior"):
        PointLinear(2, 2, ModelGenerators([0])).kl(GaussianPrior())
