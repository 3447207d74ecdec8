"""Multi-layer perceptrons built from any family (the likelihoods are in ``vbnn.training``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import pairwise
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.contracts import Activation, ForwardMode
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
    ``VariationalLayer`` subclass (a registry name or spec refuses, naming the family, an option
    its layer does not take)."""
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
        dtype: parameter dtype (None: torch's default).
        negative_slope: the slope of ``leaky_relu`` below zero (torch's default 0.01); an error
            for any other activation.
        **options: further keyword arguments of the family's layers, e.g. ``init_std`` (the
            marginal posterior std at initialisation of a learned variance), ``std`` (the fixed
            posterior std of ``gd``), ``log_alpha`` (variational dropout); ``mf`` and ``gd``
            take a (M,) tensor std too, one per model of a stack. A caller holding one std for
            any family names it with ``FamilySpec.std_option``.

    Raises:
        ValueError: an option the family's layers do not take.
    """

    takes_mode = True  # forward(x, mode, noise), like the family layers

    # Parameters: the family, sizes and activation, then independent options of every layer
    def __init__(
        self,
        family: str | FamilySpec | type[VariationalLayer],
        sizes: Sequence[int],
        activation: Activation | str,
        generators: ModelGenerators | None = None,
        dtype: torch.dtype | None = None,
        negative_slope: float | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes needs input and output widths, got {list(sizes)}")
        self.activation = ACTIVATIONS[Activation(activation)]
        if negative_slope is not None:
            if Activation(activation) is not Activation.LEAKY_RELU:
                raise ValueError(f"MLP: negative_slope applies to leaky_relu, not {activation!r}")
            self.activation = partial(functional.leaky_relu, negative_slope=negative_slope)
        build = layer_builder(family)
        self.layers = nn.ModuleList(
            build(i, o, generators, dtype=dtype, **options) for i, o in pairwise(sizes)
        )

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode | str | None = None,
        noise: NoiseSource | None = None,
    ) -> torch.Tensor:
        """x (M, N, I) -> (M, N, O) for a stack; (N, I) -> (N, O) for one network."""
        for index, layer in enumerate(self.layers):
            if index:
                x = self.activation(x)
            x = layer(x, mode, noise)
        return x
