"""Bernoulli variance layer: w = theta (2 eps - 1), eps ~ Bernoulli(1/2) (003 section 3.3).

E[w] = 0 and Var[w] = theta^2. There is no exact local reparameterization trick for this noise, so
SAMPLE draws one weight sample per model, shared by the examples of the batch (as WEIGHTS does).
Moment matching (fast dropout, Wang & Manning 2013) is available with ``moment_matching=True``: the
pre-activation is then drawn from the Gaussian with the exact mean (0) and variance
(A^2 * theta^2) of the Bernoulli layer's output, i.e. the layer trains as a Gaussian variance layer
(003: "Under fast dropout approximation all three cases would be equivalent to a Gaussian variance
layer"). The +-1 noise is sign(z) for z ~ N(0, 1) from the model's generator.

KL: q is discrete, so its KL to any density is infinite but does not depend on theta; with the
log-uniform or ARD prior we drop it (return 0, like the Gaussian variance layer); others raise.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from vbnn.core.contracts import DropoutPrior
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.stochastic import StochasticLayer


class BernoulliVarianceLayer(StochasticLayer):
    """theta (2 Bernoulli(1/2) - 1) weights; dense, or conv2d when ``kernel_size`` is set.

    Args:
        posterior_std: initial theta (= std of the weight); None: 1 / sqrt(fan_in).
        moment_matching: SAMPLE uses the Gaussian with the output's exact moments.
        Other arguments as ``VariationalDropoutLayer``.
    """

    noise_variance = 1.0  # Var(2 eps - 1)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators,
        posterior_std: float | None = None,
        dtype: torch.dtype = torch.float32,
        *,
        kernel_size: int | None = None,
        bias: bool = True,
        moment_matching: bool = False,
    ) -> None:
        super().__init__()
        self._setup(in_features, out_features, generators, kernel_size, bias, dtype)
        self.exact_lrt = moment_matching
        shape = self.operator.weight_shape(self.num_models)
        if posterior_std is None:
            posterior_std = 1.0 / math.sqrt(self.operator.fan_in())
        start = math.log(posterior_std / math.sqrt(self.noise_variance))
        spread = 0.1 * generators.randn(*shape[1:], dtype=dtype)
        self.weight_log_scale = nn.Parameter(start + spread)

    def noise(self, generators: ModelGenerators, shape, dtype) -> torch.Tensor:
        return torch.sign(generators.randn(*shape, dtype=dtype))

    def weight_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        var = torch.exp(2.0 * self.weight_log_scale) * self.noise_variance
        return torch.zeros_like(var), var

    def sample_weight(self, generators: ModelGenerators) -> torch.Tensor:
        scale = self.weight_log_scale.exp()
        return scale * self.noise(generators, scale.shape[1:], scale.dtype)

    def kl(self, prior: object) -> torch.Tensor:
        if isinstance(prior, DropoutPrior):
            return torch.zeros(self.num_models, dtype=self.weight_log_scale.dtype)
        raise TypeError(
            f"{type(self).__name__}: KL to {type(prior).__name__} is infinite (discrete q); "
            "use LogUniformPrior or ARDPrior, whose KL is dropped as a constant"
        )
