"""Closed-form Gaussian maths against torch.distributions and Monte Carlo."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, Normal, kl_divergence

from vbnn.core.gaussian import (
    gaussian_log_prob,
    kl_diagonal_gaussian,
    kl_diagonal_gaussian_log_std,
    kl_full_gaussian,
    local_reparameterization_moments,
    log_mean_exp,
)
from vbnn.priors.gaussian import GaussianPrior
from vbnn.priors.kl import DiagonalGaussian, LogStdGaussian
from vbnn.priors.kl import kl_divergence as prior_kl


def test_diagonal_kl_matches_torch_distributions() -> None:
    mean = torch.randn(3, 4, 5, dtype=torch.float64)
    std = torch.rand(3, 4, 5, dtype=torch.float64) + 0.1
    expected = kl_divergence(Normal(mean, std), Normal(0.0, 1.7)).sum((1, 2))
    torch.testing.assert_close(kl_diagonal_gaussian(mean, std, 1.7), expected)


@pytest.mark.parametrize("prior_std", [1.7, torch.tensor([0.5, 1.0, 2.0]).reshape(3, 1, 1)])
def test_diagonal_kl_gradients_are_those_of_the_closed_form(prior_std) -> None:
    """The hand-written backward (one shared prior) and the composite (one prior per model) give
    autograd's gradients of KL = sum log(s / sigma) + (sigma^2 + mu^2) / (2 s^2) - 1/2."""
    mean = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    std = (torch.rand(3, 4, 5, dtype=torch.float64) + 0.1).requires_grad_()
    prior = torch.as_tensor(prior_std, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda m, s: kl_diagonal_gaussian(m, s, prior), (mean, std))
    weights = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    (kl_diagonal_gaussian(mean, std, prior) * weights).sum().backward()
    scale = weights.reshape(3, 1, 1)
    torch.testing.assert_close(mean.grad, scale * mean.detach() / prior**2)
    torch.testing.assert_close(std.grad, scale * (std.detach() / prior**2 - 1 / std.detach()))


@pytest.mark.parametrize(
    "prior_std", [0.8, torch.tensor(0.8), torch.tensor([0.5, 1.0, 2.0])], ids=str
)
def test_log_space_kl_of_several_pairs_is_the_sum_of_their_kls(prior_std) -> None:
    """A layer's weight and bias in one call (one autograd node for the shared prior, the
    composite for one prior per model): the sum of the two KLs, values and gradients."""
    generator = torch.Generator().manual_seed(7)
    shapes = [(3, 4, 5), (3, 4, 5), (3, 5), (3, 5)]
    tensors = [
        torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_()
        for shape in shapes
    ]
    if isinstance(prior_std, torch.Tensor):
        prior_std = prior_std.double()
    prior = GaussianPrior(prior_std)
    weight, bias = (tensors[0], tensors[1]), (tensors[2], tensors[3])
    together = prior_kl(LogStdGaussian((weight, bias)), prior)
    apart = prior_kl(LogStdGaussian((weight,)), prior) + prior_kl(LogStdGaussian((bias,)), prior)
    torch.testing.assert_close(together, apart)
    weights = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    got = torch.autograd.grad((together * weights).sum(), tensors)
    want = torch.autograd.grad((apart * weights).sum(), tensors)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert torch.autograd.gradcheck(
        lambda *t: prior_kl(LogStdGaussian((t[:2], t[2:])), prior), tuple(tensors)
    )


@pytest.mark.parametrize("prior_std", [0.8, torch.tensor([0.5, 1.0, 2.0]).reshape(3, 1, 1)])
def test_log_space_diagonal_kl_equals_the_kl_of_exp_log_std(prior_std) -> None:
    """The mean-field family's log-space KL: the value and gradients of
    ``kl_diagonal_gaussian(mean, exp(log_std))``, with dKL/dlog_std = sigma^2 / s^2 - 1."""
    mean = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    log_std = (torch.randn(3, 4, 5, dtype=torch.float64) - 1.0).requires_grad_()
    prior = torch.as_tensor(prior_std, dtype=torch.float64)
    check = torch.autograd.gradcheck
    assert check(lambda m, s: kl_diagonal_gaussian_log_std(m, s, prior), (mean, log_std))
    weights = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    (kl_diagonal_gaussian_log_std(mean, log_std, prior) * weights).sum().backward()
    expected = kl_diagonal_gaussian(mean, log_std.exp(), prior)
    torch.testing.assert_close(kl_diagonal_gaussian_log_std(mean, log_std, prior), expected)
    scale = weights.reshape(3, 1, 1)
    torch.testing.assert_close(mean.grad, scale * mean.detach() / prior**2)
    sigma_squared = torch.exp(2 * log_std.detach())
    torch.testing.assert_close(log_std.grad, scale * (sigma_squared / prior**2 - 1))


def test_diagonal_kl_with_one_sigma_per_model_equals_the_expanded_sigma() -> None:
    """A fixed-variance layer passes sigma as (M, 1, 1): the KL and its gradients equal those of
    sigma expanded to every weight."""
    mean = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    sigma = torch.tensor([0.1, 0.5, 2.0], dtype=torch.float64).reshape(3, 1, 1).requires_grad_()
    shared = kl_diagonal_gaussian(mean, sigma, 0.7)
    grads = torch.autograd.grad(shared.sum(), (mean, sigma))
    expanded = kl_diagonal_gaussian(mean, sigma.expand(3, 4, 5), 0.7)
    torch.testing.assert_close(shared, expanded)
    for got, expected in zip(
        grads, torch.autograd.grad(expanded.sum(), (mean, sigma)), strict=True
    ):
        torch.testing.assert_close(got, expected)


def test_diagonal_kl_matches_monte_carlo() -> None:
    mean = torch.tensor([[0.3, -1.2]], dtype=torch.float64)
    std = torch.tensor([[0.5, 2.0]], dtype=torch.float64)
    draws = mean + std * torch.randn(400_000, 1, 2, dtype=torch.float64)
    log_ratio = gaussian_log_prob(draws, mean, std) - gaussian_log_prob(draws, 0.0, 0.8)
    estimate = log_ratio.sum(-1).mean()
    standard_error = log_ratio.sum(-1).std() / math.sqrt(draws.shape[0])
    exact = kl_diagonal_gaussian(mean, std, 0.8)[0]
    assert abs(float(estimate - exact)) < 4 * float(standard_error)


def test_full_kl_matches_torch_distributions() -> None:
    dim = 6
    raw = torch.randn(2, dim, dim, dtype=torch.float64)
    scale_tril = torch.tril(raw, -1) + torch.diag_embed(
        torch.rand(2, dim, dtype=torch.float64) + 0.2
    )
    mean = torch.randn(2, dim, dtype=torch.float64)
    prior = MultivariateNormal(torch.zeros(dim, dtype=torch.float64), 2.5**2 * torch.eye(dim))
    expected = torch.stack(
        [
            kl_divergence(MultivariateNormal(mean[m], scale_tril=scale_tril[m]), prior)
            for m in (0, 1)
        ]
    )
    torch.testing.assert_close(kl_full_gaussian(mean, scale_tril, 2.5), expected)


def test_full_kl_of_a_diagonal_factor_equals_diagonal_kl() -> None:
    mean = torch.randn(2, 7, dtype=torch.float64)
    std = torch.rand(2, 7, dtype=torch.float64) + 0.05
    full = kl_full_gaussian(mean, torch.diag_embed(std), 0.6)
    torch.testing.assert_close(full, kl_diagonal_gaussian(mean, std, 0.6))


def test_kl_is_zero_when_posterior_equals_prior() -> None:
    prior = GaussianPrior(1.3)
    kl = prior_kl(DiagonalGaussian(torch.zeros(1, 10), torch.full((1, 10), 1.3)), prior)
    assert abs(float(kl[0])) < 1e-5


def test_local_reparameterization_moments_match_weight_sampling() -> None:
    """Mean and variance of x W + b over explicit weight draws vs the LRT closed form."""
    draws = 200_000
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    weight_mean, weight_std = torch.randn(1, 4, 2), torch.rand(1, 4, 2) + 0.1
    bias_mean, bias_std = torch.randn(1, 2), torch.rand(1, 2) + 0.1
    weights = weight_mean.double() + weight_std.double() * torch.randn(draws, 4, 2).double()
    biases = bias_mean.double() + bias_std.double() * torch.randn(draws, 2).double()
    outputs = torch.einsum("ni,kio->kno", x[0], weights) + biases.unsqueeze(1)
    mean, var = local_reparameterization_moments(
        x,
        weight_mean.double(),
        weight_std.double() ** 2,
        bias_mean.double(),
        bias_std.double() ** 2,
    )
    # standard error of a sample mean is sqrt(var / K); of a sample variance ~ var sqrt(2 / K)
    assert torch.all((outputs.mean(0) - mean[0]).abs() < 5 * (var[0] / draws).sqrt())
    assert torch.all((outputs.var(0) - var[0]).abs() < 5 * var[0] * math.sqrt(2 / draws))


@pytest.mark.parametrize("dim", [0, 1])
def test_log_mean_exp_is_stable(dim: int) -> None:
    values = torch.tensor([[-1000.0, -1001.0], [-1000.5, -999.0]], dtype=torch.float64)
    expected = torch.log(torch.exp(values + 1000).mean(dim)) - 1000
    torch.testing.assert_close(log_mean_exp(values, dim), expected)


def test_a_learned_prior_std_gets_its_gradient() -> None:
    """A prior std that requires grad (empirical Bayes) gets dKL/ds = sum (1 - (sigma^2 + mu^2)
    / s^2) / s, through every form of the diagonal KL."""
    mean = torch.randn(2, 3, 4, dtype=torch.float64)
    log_std = torch.randn(2, 3, 4, dtype=torch.float64) - 1.0
    prior = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    expected = (
        (1 - (torch.exp(2 * log_std) + mean**2) / prior.detach() ** 2) / prior.detach()
    ).sum()
    for value in (
        kl_diagonal_gaussian(mean, log_std.exp(), prior),
        kl_diagonal_gaussian_log_std(mean, log_std, prior),
    ):
        (gradient,) = torch.autograd.grad(value.sum(), prior)
        torch.testing.assert_close(gradient, expected)
    shared = torch.tensor([0.2, 0.5], dtype=torch.float64).reshape(2, 1, 1)
    (gradient,) = torch.autograd.grad(kl_diagonal_gaussian(mean, shared, prior).sum(), prior)
    full = (1 - (shared.expand_as(mean) ** 2 + mean**2) / prior.detach() ** 2) / prior.detach()
    torch.testing.assert_close(gradient, full.sum())
