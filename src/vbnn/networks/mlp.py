"""Multi-layer perceptrons built from any family, and the Gaussian likelihood."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import pairwise

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.contracts import Activation, ForwardMode, Prior
from vbnn.core.gaussian import gaussian_log_prob
from vbnn.core.kernels import tanh
from vbnn.core.randomness import ModelGenerators

ACTIVATIONS: dict[Activation, Callable[[torch.Tensor], torch.Tensor]] = {
    Activation.TANH: tanh,
    Activation.RELU: torch.relu,
    Activation.LEAKY_RELU: functional.leaky_relu,
    Activation.IDENTITY: lambda x: x,
}


class MLP(nn.Module):
    """A stack of M independent MLPs whose dense layers all come from one family.

    Args:
        family: a layer class (``vbnn.layers.FAMILIES`` entry or ``PointLinear``).
        sizes: widths (input, hidden..., output).
        activation: hidden non-linearity (none after the last layer).
        generators: one per model; draws the initial means.
        posterior_std: passed to every layer (initial std, or GD's fixed std); a (M,) tensor
            gives each model its own.
    """

    def __init__(
        self,
        family: type,
        sizes: Sequence[int],
        activation: Activation,
        generators: ModelGenerators,
        posterior_std: float | torch.Tensor = 1e-4,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes needs input and output widths, got {list(sizes)}")
        self.activation = ACTIVATIONS[Activation(activation)]
        self.layers = nn.ModuleList(
            family(i, o, generators, posterior_std=posterior_std, dtype=dtype)
            for i, o in pairwise(sizes)
        )

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode = ForwardMode.SAMPLE,
        generators: ModelGenerators | None = None,
    ) -> torch.Tensor:
        """x (M, N, I) -> (M, N, O)."""
        for index, layer in enumerate(self.layers):
            if index:
                x = self.activation(x)
            x = layer(x, mode, generators)
        return x

    def kl(self, prior: Prior) -> torch.Tensor:
        return sum(layer.kl(prior) for layer in self.layers)

    def log_prior(self, prior: Prior) -> torch.Tensor:
        """Sum over layers of log p(weights) at the point weights (point layers only)."""
        return sum(layer.log_prior(prior) for layer in self.layers)


class GaussianLikelihood(nn.Module):
    """Homoscedastic y ~ N(f(x), sigma^2) with one sigma per model.

    sigma is a learned point parameter (stored as log sigma) unless ``fixed_std`` is given.
    """

    def __init__(
        self,
        num_models: int,
        fixed_std: float | None = None,
        initial_std: float = 1.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        start = torch.full((num_models,), math.log(fixed_std or initial_std), dtype=dtype)
        if fixed_std is None:
            self.log_std = nn.Parameter(start)
        else:
            self.register_buffer("log_std", start)

    def std(self) -> torch.Tensor:
        return self.log_std.exp()

    def log_prob(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Elementwise log N(target | prediction, sigma^2): prediction (M, N, 1), target (M, N)."""
        return gaussian_log_prob(target, prediction.squeeze(-1), self.std().unsqueeze(-1))
