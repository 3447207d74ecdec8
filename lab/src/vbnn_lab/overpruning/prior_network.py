"""Prior-network simulation (Figure 3 of Trippe & Turner 2017).

Data come from a correctly specified model: a one-hidden-layer tanh network with 50 units whose
weights and biases are drawn from the prior N(0, prior_std^2), a 1-D input, and Gaussian
observation noise: y_n = f_true(x_n) + noise_std * eps_n. Mean-field VI is initialised with its
means at the true weights and a small std, with the noise std fixed at its true value, so any
pruning that follows is a property of the variational objective, not of a poor start or of a
misspecified model. The paper uses N = 5, 25 and 100 points and reports that pruning occurs
robustly and that posterior function samples are biased towards a few tanh steps.

Choices the paper does not state (ours, documented): inputs x ~ Uniform(-3, 3); noise std 1;
the N-point sets are nested (the first N of one draw of 100); weights unstandardised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.diagnostics.pruning import count_pruned, diagnose_units
from vbnn.networks.mlp import MLP
from vbnn.networks.predictive import sample
from vbnn.regression.full_batch import Problem, fit
from vbnn.regression.runs import VIConfig
from vbnn.regression.stack import build_stack
from vbnn.training.likelihoods import GaussianLikelihood

SIZES = (5, 25, 100)


@dataclass(frozen=True)
class PriorNetwork:
    """True weights of f(x) = tanh(x W + b) v + c: W (1, H), b (H,), v (H, 1), c (1,)."""

    weight: torch.Tensor
    bias: torch.Tensor
    output_weight: torch.Tensor
    output_bias: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """f(x) for x (N, 1) -> (N,)."""
        return (torch.tanh(x @ self.weight + self.bias) @ self.output_weight + self.output_bias)[
            :, 0
        ]


def sample_prior_network(
    generator: torch.Generator, hidden: int = 50, prior_std: float = 1.0
) -> PriorNetwork:
    """Draw every weight and bias of a 1-input, ``hidden``-unit, 1-output network from the prior."""

    def draw(*shape: int) -> torch.Tensor:
        return prior_std * torch.randn(*shape, generator=generator, dtype=torch.float64)

    return PriorNetwork(draw(1, hidden), draw(hidden), draw(hidden, 1), draw(1))


def simulate(
    network: PriorNetwork, rows: int, noise_std: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """x ~ U(-3, 3) (rows, 1) and y = f(x) + noise_std * eps (rows,)."""
    x = 6.0 * torch.rand(rows, 1, generator=generator, dtype=torch.float64) - 3.0
    y = network(x) + noise_std * torch.randn(rows, generator=generator, dtype=torch.float64)
    return x, y


def initialise_at_truth(model: MLP, network: PriorNetwork) -> None:
    """Set every model's posterior means to the true weights (the stds are left as built)."""
    hidden, output = model.layers
    with torch.no_grad():
        hidden.weight_mean.copy_(network.weight.expand_as(hidden.weight_mean))
        hidden.bias_mean.copy_(network.bias.expand_as(hidden.bias_mean))
        output.weight_mean.copy_(network.output_weight.expand_as(output.weight_mean))
        output.bias_mean.copy_(network.output_bias.expand_as(output.bias_mean))


@dataclass
class SimulationFit:
    """One data set of the simulation and the MF posterior fitted to it."""

    rows: int
    x: torch.Tensor  # (N, 1)
    y: torch.Tensor  # (N,)
    model: MLP
    likelihood: GaussianLikelihood
    pruned: int


# Parameters: the simulation's settings, each independent; defaults the paper's (noise std ours)
def fit_prior_network(
    network: PriorNetwork,
    sizes: Sequence[int] = SIZES,
    noise_std: float = 1.0,
    iterations: int = 5000,
    initial_std: float = 1e-4,
    prior_std: float = 1.0,
    seed: int = 0,
) -> list[SimulationFit]:
    """Simulate the largest set once, take nested subsets, fit MF from the truth on each.

    Uses the paper's optimiser (Adam, lr 0.005, betas (0.9, 0.99), full batch), float64.
    """
    generator = torch.Generator().manual_seed(seed)
    x_all, y_all = simulate(network, max(sizes), noise_std, generator)
    hidden = network.weight.shape[1]
    config = VIConfig(family="mf", hidden=(hidden,), iterations=iterations,
                      prior_std=prior_std, posterior_std=initial_std, noise_std=noise_std,
                      seed=seed, dtype="float64")  # fmt: skip
    fits = []
    for rows in sizes:
        x, y = x_all[:rows], y_all[:rows]
        model, likelihood = build_stack(config, 1, [rows])
        initialise_at_truth(model, network)
        problem = Problem(model, likelihood, x.unsqueeze(0), y.unsqueeze(0))
        fit(config, problem, ModelGenerators.for_keys(seed, [rows], "train"))
        pruned = int(count_pruned(diagnose_units(model, x.unsqueeze(0), prior_std))[0])
        fits.append(SimulationFit(rows, x, y, model, likelihood, pruned))
    return fits


@torch.no_grad()
def posterior_function_samples(
    model: MLP, grid: torch.Tensor, samples: int, seed: int = 0
) -> torch.Tensor:
    """f(grid) under ``samples`` weight draws from q (one draw shared by the grid): (S, G)."""
    generators = ModelGenerators.for_keys(seed, [0], "eval")
    x = grid.reshape(1, -1, 1).to(model.layers[0].weight_mean.dtype)
    return sample(model, x, samples, ForwardMode.WEIGHTS, noise=generators)[:, 0, :, 0]
