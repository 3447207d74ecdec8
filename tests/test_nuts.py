"""NUTS through Pyro over a module's flat parameters: exact Gaussian posterior, cache, layout."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from vbnn.references.nuts import FlatParameters, NUTSConfig, call_with, module_potential, run_nuts
from vbnn.stores import unit_store

INPUTS = 4  # the posterior is over INPUTS weights and a bias


def _linear_regression_problem() -> tuple[nn.Module, torch.Tensor, torch.Tensor, float]:
    """y = x w + b + noise with correlated inputs: a 5-D correlated Gaussian posterior (off-diagonal
    covariances up to 0.37 of the largest variance)."""
    generator = torch.Generator().manual_seed(0)
    mixing = torch.eye(INPUTS, dtype=torch.float64) + 0.6  # 1.6 on the diagonal, 0.6 off it
    x = torch.randn(30, INPUTS, generator=generator, dtype=torch.float64) @ mixing / 3
    y = x @ torch.linspace(-1, 1, INPUTS, dtype=torch.float64) + 0.5
    y = y + 0.5 * torch.randn(30, generator=generator, dtype=torch.float64)
    return nn.Linear(INPUTS, 1, dtype=torch.float64), x, y, 0.5


def _exact_posterior(x: torch.Tensor, y: torch.Tensor, noise: float) -> tuple[np.ndarray, ...]:
    # parameter order of nn.Linear: weight (1, INPUTS) then bias (1,)
    design = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
    precision = design.T @ design / noise**2 + torch.eye(INPUTS + 1, dtype=x.dtype)
    covariance = torch.linalg.inv(precision)
    return (covariance @ design.T @ y / noise**2).numpy(), covariance.numpy()


def test_nuts_recovers_an_exact_gaussian_posterior() -> None:
    module, x, y, noise = _linear_regression_problem()

    def log_likelihood(model: nn.Module, params: dict[str, torch.Tensor]) -> torch.Tensor:
        prediction = call_with(model, params, x).squeeze(-1)
        return -0.5 * ((y - prediction) ** 2).sum() / noise**2

    potential, layout = module_potential(module, log_likelihood, prior_precision=1.0)
    mean, covariance = _exact_posterior(x, y, noise)
    assert np.abs(covariance - np.diag(np.diag(covariance))).max() > 0.1 * covariance.max()
    result = run_nuts(
        potential, layout.flatten(module), NUTSConfig(warmup=100, samples=300, seed=1)
    )
    ess = result.diagnostics["ess_min"]
    assert ess > 100  # tolerances below assume a usable chain
    standard = np.sqrt(np.diag(covariance))
    error = np.abs(result.samples.mean(0) - mean) / (standard / np.sqrt(ess))
    assert error.max() < 5.0
    # standard error of a covariance entry: sqrt((S_ii S_jj + S_ij^2) / ESS)
    estimate = np.cov(result.samples.T)
    spread = np.sqrt((np.outer(np.diag(covariance), np.diag(covariance)) + covariance**2) / ess)
    assert (np.abs(estimate - covariance) / spread).max() < 5.0
    assert result.diagnostics["rhat_max"] < 1.05
    assert result.diagnostics["divergences"] == 0
    assert 0.6 < result.diagnostics["accept_probability"] <= 1.0
    assert result.leapfrog_steps.shape == (300,) and result.leapfrog_steps.min() >= 1


def test_potential_gradient_is_the_exact_one() -> None:
    module, x, y, noise = _linear_regression_problem()

    def log_likelihood(model: nn.Module, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return -0.5 * ((y - call_with(model, params, x).squeeze(-1)) ** 2).sum() / noise**2

    potential, _ = module_potential(module, log_likelihood, prior_precision=2.0)
    theta = torch.randn(INPUTS + 1, dtype=torch.float64, requires_grad=True)
    (gradient,) = torch.autograd.grad(potential(theta), theta)
    design = torch.cat([x, torch.ones(30, 1, dtype=x.dtype)], 1)
    residual = y - design @ theta.detach()
    torch.testing.assert_close(gradient, -design.T @ residual / noise**2 + 2.0 * theta.detach())


def test_flat_parameters_round_trip_and_errors() -> None:
    module = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    layout = FlatParameters(module)
    vector = layout.flatten(module)
    assert layout.dimension == 3 * 4 + 4 + 4 * 2 + 2 == vector.shape[0]
    for name, value in layout.unflatten(vector).items():
        torch.testing.assert_close(value, dict(module.named_parameters())[name].detach())
    with pytest.raises(ValueError, match="length 26"):
        layout.unflatten(torch.zeros(5))
    with pytest.raises(ValueError, match="samples"):
        NUTSConfig(samples=0)


def test_sample_cache_round_trip(tmp_path) -> None:
    settings = {"depth": 2, "activation": "relu", "seed": 3}
    assert unit_store.load(tmp_path, settings) is None
    arrays = {"samples": np.arange(6.0).reshape(3, 2)}
    unit_store.save(tmp_path, settings, arrays, {"ess_min": 12.5})
    loaded, info = unit_store.load(tmp_path, settings)
    np.testing.assert_array_equal(loaded["samples"], arrays["samples"])
    assert info == {"ess_min": 12.5}
    assert unit_store.load(tmp_path, {**settings, "seed": 4}) is None
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert record["settings"] == settings
    assert not list(tmp_path.glob(".*tmp"))
