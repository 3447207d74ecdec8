"""Objectives, training and the engine: conjugate posterior, batched == alone, errors."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vbnn.core.contracts import Activation
from vbnn.core.randomness import ModelGenerators
from vbnn.data import load_uci
from vbnn.data.splits import stack_splits
from vbnn.layers import FullCovariance
from vbnn.networks.mlp import MLP
from vbnn.priors.gaussian import GaussianPrior
from vbnn.regression.engine import run_splits
from vbnn.regression.evaluation import metrics_from_predictions
from vbnn.regression.full_batch import NonFiniteLossError, Problem, fit
from vbnn.regression.methods import method_config, taken_by
from vbnn.regression.runs import TABLE1_METHODS
from vbnn.regression.stack import build_stack
from vbnn.training.likelihoods import GaussianLikelihood
from vbnn.training.objectives import elbo, expected_log_likelihood


def test_kl_weight_scales_only_the_kl_term() -> None:
    config = method_config("mf", hidden=(8,), posterior_std=0.1)
    model, likelihood = build_stack(config, 3, [0, 1])
    x, y = torch.randn(2, 20, 3), torch.randn(2, 20)
    prior = GaussianPrior(1.0)
    terms = {
        w: elbo(model, likelihood, prior, x, y, ModelGenerators([1, 2]), kl_weight=w)
        for w in (0.0, 0.25, 1.0)
    }
    torch.testing.assert_close(terms[0.0]["objective"], terms[1.0]["log-likelihood"])
    torch.testing.assert_close(
        terms[0.25]["objective"], terms[1.0]["log-likelihood"] - 0.25 * terms[1.0]["KL"]
    )


def test_predictive_metrics_of_one_sample_are_the_gaussian_density_in_original_units() -> None:
    """One prediction f: log N(y | f, s^2) averaged over examples, minus the log of the target
    scale c (y and f standardised); RMSE |y - f| times c."""
    predictions = torch.tensor([[[0.5, -1.0]]], dtype=torch.float64)
    target = torch.tensor([[0.0, 0.0]], dtype=torch.float64)
    scale = torch.tensor([3.0], dtype=torch.float64)
    got = metrics_from_predictions(
        predictions, torch.tensor([2.0], dtype=torch.float64), target, scale
    )
    density = -0.5 * (predictions[0] / 2) ** 2 - math.log(2) - 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(got.log_likelihood, density.mean(-1) - math.log(3.0))
    torch.testing.assert_close(got.rmse, predictions[0].pow(2).mean(-1).sqrt() * 3.0)


def conjugate_problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """y = x w + b + noise; returns x, y and the exact posterior mean and covariance of (w, b)."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(1, 30, 2, generator=generator, dtype=torch.float64)
    y = x[0] @ torch.tensor([1.0, -0.5], dtype=torch.float64) + 0.3
    y = (y + 0.5 * torch.randn(30, generator=generator, dtype=torch.float64)).unsqueeze(0)
    design = torch.cat([x[0], torch.ones(30, 1, dtype=torch.float64)], 1)
    precision = torch.eye(3, dtype=torch.float64) / 1.0**2 + design.T @ design / 0.5**2
    covariance = torch.linalg.inv(precision)
    mean = covariance @ design.T @ y[0] / 0.5**2
    return x, y, mean, covariance


def test_expected_log_likelihood_estimate_is_unbiased_for_a_linear_model() -> None:
    x, y, _, _ = conjugate_problem()
    layer_config = method_config("fc", hidden=(), activation=Activation.IDENTITY)
    model, likelihood = build_stack(layer_config, 2, [0])
    likelihood = GaussianLikelihood(1, fixed_std=0.5, dtype=torch.float32)
    model = model.double()
    likelihood = likelihood.double()
    with torch.no_grad():
        model.layers[0].scale_log_diagonal.fill_(math.log(0.2))
        model.layers[0].scale_lower.copy_(0.1 * torch.randn(1, 3, 3).tril(-1))
    layer = model.layers[0]
    design = torch.cat([x[0], torch.ones(30, 1, dtype=torch.float64)], 1)
    mean, scale = layer.mean.detach().flatten(), layer.scale_tril().detach()[0]
    residual = y[0] - design @ mean
    exact = -30 * (math.log(0.5) + 0.5 * math.log(2 * math.pi)) - (
        residual @ residual + torch.trace(design @ scale @ scale.T @ design.T)
    ) / (2 * 0.25)
    generators = ModelGenerators([9])
    with torch.no_grad():
        draws = torch.stack(
            [expected_log_likelihood(model, likelihood, x, y, generators)[0] for _ in range(4000)]
        )
    assert abs(float(draws.mean() - exact)) < 4 * float(draws.std()) / math.sqrt(4000)


def test_full_covariance_optimum_is_the_exact_conjugate_posterior() -> None:
    """Bayesian linear regression with known noise: q* = p(w | D) exactly, and FC can reach it."""
    x, y, mean, covariance = conjugate_problem()
    config = method_config(
        "fc",
        hidden=(),
        activation=Activation.IDENTITY,
        noise_std=0.5,
        posterior_std=0.1,
        iterations=300,
        learning_rate=0.03,
        train_samples=4,
        dtype="float64",
    )
    model, likelihood = build_stack(config, 2, [0])
    generators = ModelGenerators([4])
    fit(config, Problem(model, likelihood, x, y), generators)
    # a second, slower phase averages out the gradient noise of the first (the fit ends within
    # 0.02 posterior sd of the mean and 0.03 of the covariance: the bounds below leave 4x room)
    fine = dataclasses.replace(config, iterations=600, learning_rate=0.001, train_samples=8)
    fit(fine, Problem(model, likelihood, x, y), generators)
    layer = model.layers[0]
    fitted_mean = layer.mean.detach()[0].flatten()
    fitted_covariance = (layer.scale_tril() @ layer.scale_tril().transpose(-1, -2)).detach()[0]
    posterior_std = covariance.diagonal().sqrt()
    assert torch.all((fitted_mean - mean).abs() < 0.1 * posterior_std)
    correlation_scale = posterior_std.outer(posterior_std)
    assert torch.all((fitted_covariance - covariance).abs() < 0.1 * correlation_scale)


def test_non_finite_loss_names_iteration_model_and_group() -> None:
    config = method_config("mf", hidden=(4,), iterations=5)
    model, likelihood = build_stack(config, 2, [0, 1])
    with torch.no_grad():
        model.layers[1].weight_log_std[1].fill_(float("nan"))
    with pytest.raises(
        NonFiniteLossError, match=r"iteration 1 in model 1 \(split 1\).*layers.1.weight_log_std"
    ):
        problem = Problem(model, likelihood, torch.randn(2, 10, 2), torch.randn(2, 10))
        fit(config, problem, ModelGenerators([1, 2]), labels=["split 0", "split 1"])


@pytest.mark.parametrize("method", TABLE1_METHODS)
def test_a_split_alone_and_in_a_batch_gives_the_same_numbers(method: str, data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    values = {"iterations": 60, "test_samples": 10, "eval_every": 5}
    config = method_config(method, **taken_by(method, values))
    batched = run_splits(boston, [0, 1, 2], config)
    alone = run_splits(boston, [1], config)
    assert batched.splits[1].test_log_likelihood == pytest.approx(
        alone.splits[0].test_log_likelihood, rel=1e-4
    )
    assert batched.splits[1].test_rmse == pytest.approx(alone.splits[0].test_rmse, rel=1e-4)
    assert batched.splits[1].stopped_iteration == alone.splits[0].stopped_iteration


def test_same_seed_same_numbers_other_seed_other_numbers(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    config = method_config("mf", iterations=30, test_samples=5)
    first, again = run_splits(boston, [0], config), run_splits(boston, [0], config)
    other = run_splits(boston, [0], method_config("mf", iterations=30, test_samples=5, seed=1))
    assert first.splits == tuple(
        type(s)(**{**s.__dict__, "train_seconds": first.splits[i].train_seconds})
        for i, s in enumerate(again.splits)
    )
    assert other.splits[0].test_log_likelihood != first.splits[0].test_log_likelihood


def test_short_boston_run_beats_a_constant_predictor(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    splits = [0, 1, 2, 3]
    result = run_splits(boston, splits, method_config("mf", iterations=1000, test_samples=20))
    for split, outcome in zip(splits, result.splits, strict=True):
        train, test = boston.split(split)
        mean, std = boston.target[train].mean(), boston.target[train].std()
        constant = np.mean(
            -0.5 * ((boston.target[test] - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
        )
        assert outcome.test_log_likelihood > constant + 0.3


def test_early_stopping_keeps_the_best_validation_iteration(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    config = method_config("es", iterations=400, eval_every=20, learning_rate=0.05)
    result = run_splits(boston, [0, 1], config)
    for outcome in result.splits:
        assert outcome.stopped_iteration is not None
        assert 20 <= outcome.stopped_iteration <= 400 and outcome.stopped_iteration % 20 == 0


def test_unknown_split_fails_before_training(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    with pytest.raises(ValueError, match="split 20 does not exist"):
        run_splits(boston, [0, 20], method_config("mf", iterations=1))


def test_invalid_config_is_named() -> None:
    with pytest.raises(ValueError, match="invalid prior_std"):
        method_config("mf", prior_std=0.0)
    with pytest.raises(ValueError, match="invalid device='gpu'"):
        method_config("mf", device="gpu")
    assert method_config("mf", device=torch.device("cuda", 1)).to_dict()["device"] == "cuda:1"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without CUDA")
def test_a_cuda_run_without_cuda_names_the_device(data_dir: Path) -> None:
    with pytest.raises(RuntimeError, match=r"device='cuda'.*sees 0 CUDA device"):
        config = method_config("mf", iterations=1, device="cuda")
        run_splits(load_uci("boston", data_dir), [0], config)


def test_stacked_inputs_are_per_split(data_dir: Path) -> None:
    boston = load_uci("boston", data_dir)
    data = stack_splits(boston, [3, 4])
    model = MLP(FullCovariance, (13, 1), Activation.IDENTITY, ModelGenerators([1, 2]))
    assert model(data.x_train, noise=ModelGenerators([1, 2])).shape == (2, 455, 1)


def test_correlation_learning_rate_applies_to_the_off_diagonal_factor_only() -> None:
    config = method_config(
        "fc", hidden=(3,), iterations=3, posterior_std=0.1, correlation_learning_rate=1e-9
    )
    model, likelihood = build_stack(config, 2, [0])
    with torch.no_grad():
        model.layers[0].scale_lower.copy_(0.1 * torch.randn(1, 9, 9).tril(-1))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    problem = Problem(model, likelihood, torch.randn(1, 10, 2), torch.randn(1, 10))
    fit(config, problem, ModelGenerators([1]))
    for name, parameter in model.named_parameters():
        change = float((parameter.detach() - before[name]).abs().max())
        if name.endswith("scale_lower"):
            assert change < 1e-7, name
        else:
            assert change > 1e-4, name


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("clang++") is None,
    reason="torch.compile needs a C++ compiler",
)
# torch.compile's internals raise DeprecationWarnings of their own (torch 2.13: torch.jit
# script_method, instantiating autograd Functions while tracing); none comes from vbnn
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("method", ["mf", "map"])
def test_compiled_step_matches_the_eager_step(method: str) -> None:
    generator = torch.Generator().manual_seed(11)
    x, y = torch.randn(2, 30, 3, generator=generator), torch.randn(2, 30, generator=generator)
    states = []
    for compiled in (False, True):
        values = {"hidden": (8,), "iterations": 15, "posterior_std": 0.05, "compile": compiled}
        config = method_config(method, **taken_by(method, values))
        model, likelihood = build_stack(config, 3, [0, 1])
        fit(config, Problem(model, likelihood, x, y), ModelGenerators([5, 6]))
        states.append({**model.state_dict(), **likelihood.state_dict()})
    eager, compiled_state = states
    assert eager.keys() == compiled_state.keys()
    for name, value in eager.items():
        torch.testing.assert_close(compiled_state[name], value, rtol=1e-4, atol=1e-5)


def test_fit_names_non_finite_data_and_a_target_that_would_broadcast() -> None:
    generators = ModelGenerators([0, 1])
    model = MLP("mf", [2, 4, 1], "tanh", generators)
    likelihood = GaussianLikelihood(2)
    x, y = torch.randn(2, 6, 2), torch.randn(2, 6)
    config = method_config("mf", iterations=2)
    x[1, 4, 0] = float("inf")
    with pytest.raises(ValueError, match="inputs hold NaN or inf in model 1, row 4"):
        fit(config, Problem(model, likelihood, x, y), generators)
    with pytest.raises(ValueError, match=r"targets \(1, 6, 1\) must be \(M, N\) = \(2, 6\)"):
        fit(config, Problem(model, likelihood, x.nan_to_num(), y[:1].unsqueeze(-1)), generators)


def test_a_posterior_std_for_a_family_without_one_is_refused() -> None:
    from vbnn.regression.methods import method_config
    from vbnn.regression.stack import build_stack

    model, _ = build_stack(method_config("gd", posterior_std=0.01), 3, [0, 1])
    assert all(torch.allclose(layer.std, torch.tensor(0.01)) for layer in model.layers)  # kept
    build_stack(method_config("vd-layer"), 3, [0])  # the default: nothing to set
    with pytest.raises(ValueError, match="vd-layer: its layers have no posterior std"):
        build_stack(method_config("vd-layer", posterior_std=0.01), 3, [0])
