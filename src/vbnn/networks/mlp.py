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
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.registry import FamilySpec
from vbnn.layers.registry import family as family_spec
from vbnn.layers.shell import VariationalLayer

ACTIVATIONS: dict[Activation, Callable[[torch.Tensor], torch.Tensor]] = {
    Activation.TANH: tanh,
    Activation.RELU: torch.relu,
    Activation.LEAKY_RELU: functional.leaky_relu,
    Activation.IDENTITY: lambda x: x,
}


def layer_builder(family: str | FamilySpec | type[VariationalLayer]):
    """A callable ``(in, out, generators, **options) -> layer`` for a registry name, a spec or a
    ``VariationalLayer`` subclass."""
    if isinstance(family, str):
        return family_spec(family).build
    if isinstance(family, FamilySpec):
        return family.build
    if isinstance(family, type) and issubclass(family, VariationalLayer):
        return family
    raise TypeError(f"family must be a FAMILIES name, a FamilySpec or a layer class: {family!r}")


class MLP(nn.Module):
    """An MLP whose dense layers all come from one family; one network or a stack of M.

    Args:
        family: a ``vbnn.layers.FAMILIES`` name, a ``FamilySpec`` or a layer class.
        sizes: widths (input, hidden..., output).
        activation: hidden non-linearity (none after the last layer).
        generators: a ``ModelGenerators`` for a stack of M models (draws the initial means);
            None for one network (input (N, I), output (N, O)).
        posterior_std: passed to every layer (initial std, or GD's fixed std); a (M,) tensor
            gives each model its own.
        dtype: parameter dtype (None: torch's default).
        **options: further keyword arguments of the family's layers.
    """

    def __init__(
        self,
        family: str | FamilySpec | type[VariationalLayer],
        sizes: Sequence[int],
        activation: Activation | str,
        generators: ModelGenerators | None = None,
        posterior_std: float | torch.Tensor = 1e-4,
        dtype: torch.dtype | None = None,
        **options,
    ) -> None:
        super().__init__()
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes needs input and output widths, got {list(sizes)}")
        self.activation = ACTIVATIONS[Activation(activation)]
        build = layer_builder(family)
        self.layers = nn.ModuleList(
            build(i, o, generators, posterior_std=posterior_std, dtype=dtype, **options)
            for i, o in pairwise(sizes)
        )

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode | str | None = None,
        generators: NoiseSource | None = None,
    ) -> torch.Tensor:
        """x (M, N, I) -> (M, N, O) for a stack; (N, I) -> (N, O) for one network."""
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
