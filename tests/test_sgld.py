"""SGLD: step-size schedule, exact conjugate posterior, clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from test_training import conjugate_problem
from torch.distributions import Normal

import vbnn
from vbnn.core.contracts import Activation
from vbnn.core.randomness import ModelGenerators
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression import sgld
from vbnn.regression.full_batch import NonFiniteLossError, Problem
from vbnn.regression.methods import method_config
from vbnn.regression.stack import build_stack
from vbnn.training.batches import StackedBatches
from vbnn.training.preparation import ScheduleFactor, langevin_step_size, step_objective
from vbnn.training.settings import LearningRateSchedule, Objective, TrainerConfig

CPU = torch.device("cpu")
CONSTANT = ScheduleFactor(LearningRateSchedule.CONSTANT, epochs=1)  # factor 1


def test_step_size_follows_the_polynomial_schedule() -> None:
    """SGLD's eps_t = (eta / N) (1 + (t - 1) / decay_steps)^-gamma, as ``sample`` sets up the
    trainer's Langevin step size: eta = 0.3, N = 100, gamma = 0.75, decay_steps = 10."""
    config = method_config("sgld", step_size=0.3, step_decay=0.75, decay_steps=10)
    settings = TrainerConfig(step_decay=config.step_decay, decay_steps=config.decay_steps)
    eps = langevin_step_size(settings, config.step_size / 100, CONSTANT, None, None, CPU)
    assert eps(1) == pytest.approx(0.003)
    assert eps(31) == pytest.approx(0.003 * 4**-0.75)
    per_model = TrainerConfig(step_decay=0.75, decay_steps=10, model_learning_rates=(0.1, 0.4))
    eps = langevin_step_size(per_model, 0.003, CONSTANT, 2, None, CPU)
    torch.testing.assert_close(eps(31), torch.tensor([0.1, 0.4]) * 4**-0.75)


def test_log_posterior_is_the_explicit_log_density_of_a_linear_model() -> None:
    """The trainer's "sgld" objective with SGLD's noise prior: (N / n) sum_batch log N(y | x w +
    b, sigma^2) + log N(w, b | 0, s^2) + log N(log sigma | 0, 1), per model of a stack of two
    linear networks, on a batch of n = 5 of N = 40 rows."""
    config = method_config("sgld", hidden=(), activation=Activation.IDENTITY, dtype="float64")
    model, likelihood = build_stack(config, 3, [0, 1])
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        likelihood.log_std.copy_(torch.tensor([-0.3, 0.4], dtype=torch.float64))
        for parameter in model.parameters():
            parameter.normal_(generator=generator)
    x = torch.randn(2, 40, 3, generator=generator, dtype=torch.float64)
    y = torch.randn(2, 40, generator=generator, dtype=torch.float64)
    streams = ModelGenerators([0, 1])
    batches = StackedBatches(x, y, 5, streams)
    settings = TrainerConfig(noise_prior_std=sgld.NOISE_LOG_STD_PRIOR_STD)
    terms = step_objective(model, likelihood, GaussianPrior(0.7), Objective.SGLD, batches,
                            streams, settings, 2)  # fmt: skip
    batches.epoch()
    x, y = batches.batch(1)  # the rows step 1 reads: (2, 5, 3), (2, 5)
    layer = model.layers[0]
    weight, bias = layer.weight[:, :, 0], layer.bias[:, 0]  # (M, I), (M,)
    sigma = likelihood.log_std.exp()
    output = (x * weight.unsqueeze(1)).sum(-1) + bias.unsqueeze(1)
    data = Normal(output, sigma.unsqueeze(1)).log_prob(y).sum(-1) * (40 / 5)
    parameters = torch.cat([weight, bias.unsqueeze(1)], 1)
    weights_prior = Normal(0.0, 0.7).log_prob(parameters).sum(-1)
    noise_prior = Normal(0.0, 1.0).log_prob(likelihood.log_std)
    got = terms(1)["objective"]
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


def test_one_epoch_of_many_steps_is_many_epochs_of_one_step() -> None:
    """The Langevin step size decays over the run's steps and each step draws its own batch,
    so 30 steps in one epoch (how ``sample`` runs) move the chains exactly as 30 epochs of one
    step."""
    config = method_config("sgld", hidden=(4,))
    generator = torch.Generator().manual_seed(3)
    x, y = torch.randn(2, 20, 2, generator=generator), torch.randn(2, 20, generator=generator)
    settings = TrainerConfig(step_decay=0.6, decay_steps=5, noise_prior_std=1.0)
    states = []
    for epochs, steps in ((1, 30), (30, 1)):
        model, likelihood = build_stack(config, 2, [0, 1])
        streams = ModelGenerators([0, 1])
        batches = StackedBatches(x, y, 5, streams, replacement=True, steps=steps)
        vbnn.train(model, batches, likelihood=likelihood, objective="sgld",
                   prior=GaussianPrior(1.0), epochs=epochs, learning_rate=1e-3, progress=False,
                   config=settings, noise=streams)  # fmt: skip
        states.append([*model.parameters(), *likelihood.parameters()])
    start, _ = build_stack(config, 2, [0, 1])
    assert not torch.equal(next(start.parameters()), states[0][0])  # the chains moved
    for one_epoch, many_epochs in zip(*states, strict=True):
        assert torch.equal(one_epoch, many_epochs)
