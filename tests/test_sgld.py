"""SGLD: step-size schedule, exact conjugate posterior, clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from test_training import conjugate_problem
from torch.distributions import Normal

from vbnn.core.contracts import Activation
from vbnn.core.randomness import ModelGenerators
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression import sgld
from vbnn.regression.methods import method_config
from vbnn.regression.stack import build_stack
from vbnn.training.full_batch import NonFiniteLossError, Problem


def test_step_size_follows_the_polynomial_schedule() -> None:
    config = method_config("sgld", step_size=0.3, step_decay=0.75, decay_steps=10)
    assert sgld.step_size(config, 1, 100) == pytest.approx(0.003)
    assert sgld.step_size(config, 31, 100) == pytest.approx(0.003 * 4**-0.75)


def test_log_posterior_is_the_explicit_log_density_of_a_linear_model() -> None:
    """(N / n) sum_batch log N(y | x w + b, sigma^2) + log N(w, b | 0, s^2) + log N(log sigma |
    0, 1), per model of a stack of two linear networks."""
    config = method_config("sgld", hidden=(), activation=Activation.IDENTITY, dtype="float64")
    model, likelihood = build_stack(config, 3, [0, 1])
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        likelihood.log_std.copy_(torch.tensor([-0.3, 0.4], dtype=torch.float64))
        for parameter in model.parameters():
            parameter.normal_(generator=generator)
    x = torch.randn(2, 5, 3, generator=generator, dtype=torch.float64)
    y = torch.randn(2, 5, generator=generator, dtype=torch.float64)
    layer = model.layers[0]
    weight, bias = layer.weight[:, :, 0], layer.bias[:, 0]  # (M, I), (M,)
    sigma = likelihood.log_std.exp()
    output = (x * weight.unsqueeze(1)).sum(-1) + bias.unsqueeze(1)
    data = Normal(output, sigma.unsqueeze(1)).log_prob(y).sum(-1) * (40 / 5)
    parameters = torch.cat([weight, bias.unsqueeze(1)], 1)
    weights_prior = Normal(0.0, 0.7).log_prob(parameters).sum(-1)
    noise_prior = Normal(0.0, 1.0).log_prob(likelihood.log_std)
    got = sgld.log_posterior(model, likelihood, GaussianPrior(0.7), x, y, num_examples=40)
    torch.testing.assert_close(got, data + weights_prior + noise_prior)


def test_samples_match_the_exact_conjugate_posterior() -> None:
    """Bayesian linear regression with known noise: 40 chains pooled vs the exact Gaussian."""
    x, y, mean, covariance = conjugate_problem()
    chains = 40
    config = method_config(
        "sgld",
        hidden=(),
        activation=Activation.IDENTITY,
        noise_std=0.5,
        iterations=2000,
        burn_in=500,
        thinning=10,
        step_size=0.02,
        dtype="float64",
    )
    model, likelihood = build_stack(config, 2, list(range(chains)))
    states = sgld.sample(
        config,
        Problem(model, likelihood, x.expand(chains, -1, -1), y.expand(chains, -1)),
        ModelGenerators.for_keys(0, range(chains), "train"),
    )
    draws = torch.cat(
        [
            torch.cat([s["model.layers.0.weight"][:, :, 0], s["model.layers.0.bias"]], 1)
            for s in states
        ]
    )  # (samples x chains, 3)
    posterior_std = covariance.diagonal().sqrt()
    # chains are independent: the error of the pooled mean is about posterior_std / sqrt(chains)
    assert torch.all((draws.mean(0) - mean).abs() < 4 * posterior_std / math.sqrt(chains))
    sample_covariance = torch.cov(draws.T)
    assert torch.all(
        (sample_covariance - covariance).abs() < 0.15 * posterior_std.outer(posterior_std)
    )


def test_too_large_a_step_is_named() -> None:
    config = method_config("sgld", hidden=(4,), iterations=50, step_size=1e6)
    model, likelihood = build_stack(config, 2, [0])
    with pytest.raises(NonFiniteLossError, match=r"lower SGLDConfig\.step_size"):
        sgld.sample(
            config,
            Problem(model, likelihood, torch.randn(1, 10, 2), torch.randn(1, 10)),
            ModelGenerators([1]),
        )


def test_no_kept_sample_is_an_error() -> None:
    config = method_config("sgld", hidden=(4,), iterations=20, burn_in=20)
    model, likelihood = build_stack(config, 2, [0])
    with pytest.raises(ValueError, match="kept no samples"):
        sgld.sample(
            config,
            Problem(model, likelihood, torch.randn(1, 10, 2), torch.randn(1, 10)),
            ModelGenerators([1]),
        )
