"""Point layers: deterministic weights, for maximum likelihood (ES), MAP and SGLD.

A point estimate is the degenerate member of every family (all variances 0): every forward mode
gives the same output and draws no noise. Its KL is 0 (``has_kl = False``: a point model trains
under the same loop, on the expected log-likelihood alone); MAP adds ``log_prior``.
"""

from __future__ import annotations

from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ParameterRole, Prior
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import Moments, VariationalLayer


class Point(VariationalLayer):
    """Dense or convolutional layer of point weights (LeCun-normal initial weights, zero biases)."""

    family_name = "point"
    roles = MappingProxyType({"weight": ParameterRole.MEAN, "bias": ParameterRole.MEAN})
    has_zero_mean_form = False  # point weights: Neklyudov et al. 2019's Theorem 1 does not apply
    has_kl = False
    exact_lrt = False  # LOCAL returns the point weights without drawing noise

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        self.weight = nn.Parameter(self.initial_mean(dtype))
        self.point_bias(self.weight.dtype)

    def means(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.weight, self.bias

    def weight_moments(self) -> Moments:
        return self.weight, torch.zeros_like(self.weight)

    def sample(self, noise: NoiseSource) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.weight, self.bias

    def kl(self, prior: Prior) -> torch.Tensor:
        """0 per model, (M,): point weights carry no KL term."""
        return self.weight.new_zeros(self.num_models)
