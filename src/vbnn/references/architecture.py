"""One description of a point-weight MLP and its posterior; both samplers' potentials come from it.

:class:`MLPArchitecture` (widths, activation, LeakyReLU slope, prior std, likelihood) builds the
torch network (vbnn's ``MLP`` of ``Point`` layers) and its potential here, and the JAX potential in
``vbnn.references.jax_potential``; ``tests/test_jax_potential.py`` checks value and gradient of the
two equal at random points. The flat parameter vector is the torch module's ``named_parameters``
order: per layer the weight (1, I, O) then the bias (1, O).

U(theta) = -sum_n log p(y_n | f_theta(x_n)) + |theta|^2 / (2 prior_std^2)     (up to a constant)

with a Bernoulli likelihood on one logit, sum_n BCE(f_theta(x_n), y_n) (Farquhar et al. 2020,
appendix B: two moons, N(0, 1) prior).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.contracts import Activation, ForwardMode
from vbnn.core.defaults import PRIOR_STD
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.point import Point
from vbnn.networks.mlp import MLP
from vbnn.references.nuts import FlatParameters, Potential, call_with, module_potential

PIECEWISE_LINEAR = (Activation.RELU, Activation.LEAKY_RELU, Activation.IDENTITY)


class ObservationModel(str, Enum):
    """BERNOULLI: one logit per input, labels in {0, 1}."""

    BERNOULLI = "bernoulli"


@dataclass(frozen=True)
class MLPArchitecture:
    """A dense network and its prior and likelihood.

    Attributes:
        sizes: widths (inputs, hidden..., outputs).
        activation: relu, leaky_relu or identity (the samplers' and the local product matrix's
            piecewise-linear activations).
        negative_slope: LeakyReLU slope below zero (ignored for relu and identity).
        prior_std: std of the isotropic Gaussian prior on every weight and bias.
        likelihood: the observation model.
    """

    sizes: tuple[int, ...]
    activation: Activation
    negative_slope: float = 0.01
    prior_std: float = PRIOR_STD
    likelihood: ObservationModel = ObservationModel.BERNOULLI

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(int(size) for size in self.sizes))
        object.__setattr__(self, "activation", Activation(self.activation))
        object.__setattr__(self, "likelihood", ObservationModel(self.likelihood))
        if len(self.sizes) < 2 or min(self.sizes) < 1:
            raise ValueError(f"MLPArchitecture: sizes must be >= 2 positive widths: {self.sizes}")
        if self.activation not in PIECEWISE_LINEAR:
            raise ValueError(
                f"MLPArchitecture: activation must be one of {[a.value for a in PIECEWISE_LINEAR]},"
                f" got {self.activation.value!r}"
            )
        if self.likelihood is ObservationModel.BERNOULLI and self.sizes[-1] != 1:
            raise ValueError(f"MLPArchitecture: bernoulli needs one output, sizes {self.sizes}")
        if not self.prior_std > 0 or not self.negative_slope >= 0:
            raise ValueError(
                f"MLPArchitecture: prior_std > 0 and negative_slope >= 0 needed, got "
                f"{self.prior_std}, {self.negative_slope}"
            )

    @property
    def slope(self) -> float:
        """Slope below zero: 0 (relu), negative_slope (leaky_relu), 1 (identity)."""
        return {Activation.RELU: 0.0, Activation.IDENTITY: 1.0}.get(
            self.activation, self.negative_slope
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sizes": list(self.sizes),
            "activation": self.activation.value,
            "negative_slope": self.negative_slope,
            "prior_std": self.prior_std,
            "likelihood": self.likelihood.value,
        }

    def torch_network(self, dtype: torch.dtype = torch.float32) -> MLP:
        """The point-weight network (one model; weights drawn by the layers' initialiser)."""
        slope = self.negative_slope if self.activation is Activation.LEAKY_RELU else None
        return MLP(
            Point, self.sizes, self.activation, ModelGenerators([0]), dtype=dtype,
            negative_slope=slope,
        )  # fmt: skip

    def torch_potential(
        self, network: nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[Potential, FlatParameters]:
        """U(theta) of ``network`` (from :meth:`torch_network`), inputs x (N, I), labels y (N,)."""
        if x.dim() != 2 or x.shape[1] != self.sizes[0] or y.shape != (x.shape[0],):
            raise ValueError(
                f"torch_potential: x must be (N, {self.sizes[0]}) and y (N,), got "
                f"{tuple(x.shape)} and {tuple(y.shape)}"
            )
        inputs = x.unsqueeze(0)

        def log_likelihood(module: nn.Module, params: dict[str, torch.Tensor]) -> torch.Tensor:
            logits = call_with(module, params, inputs, ForwardMode.MEAN).reshape(-1)
            return -functional.binary_cross_entropy_with_logits(logits, y, reduction="sum")

        return module_potential(network, log_likelihood, self.prior_std**-2)
