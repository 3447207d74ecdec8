"""SGLD: step-size schedule, exact conjugate posterior, clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from test_training import conjugate_problem

from vbnn.core.contracts import Activation
from vbnn.core.randomness import ModelGenerators
from vbnn.regression import sgld
from vbnn.regression.methods import method_config
from vbnn.regression.stack import build_stack
from vbnn.training.full_batch import NonFiniteLossError, Problem


def test_step_size_follows_the_polynomial_schedule() -> None:
    config = method_config("sgld", step_size=0.3, step_decay=0.75, decay_steps=10)
    assert sgld.step_size(config, 1, 100) == pytest.approx(0.003)
    assert sgld.step_size(config, 31, 100) == pytest.approx(0.003 * 4**-0.75)


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
