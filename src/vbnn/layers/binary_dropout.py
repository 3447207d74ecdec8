"""Binary dropout baseline (Srivastava et al. 2014), the "Dropout" rows of 003 Table 2.

Point weights W; the inputs of the layer are multiplied by z / (1 - p), z ~ Bernoulli(1 - p)
(inverted dropout), independently per example and input unit (per input element for conv) in
SAMPLE mode. WEIGHTS draws one mask per model shared by the examples (one "weight sample":
rows of W zeroed). MEAN is the weight-scaling rule (eq. 3 of 003): no mask. There is no KL (the
baseline is trained by maximum likelihood): ``kl`` returns zeros. The implied weight marginal has
mean W and variance W^2 p / (1 - p), which ``posterior_std`` reports. A Bernoulli(1 - p) draw is
z > Phi^-1(p) for a standard normal z from the model's generator.
"""

from __future__ import annotations

from statistics import NormalDist

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.base import require_generators
from vbnn.layers.stochastic import StochasticLayer


class BinaryDropoutLayer(StochasticLayer):
    """Dense, or conv2d when ``kernel_size`` is set, with binary dropout of rate ``rate`` on its
    input. ``rate = 0`` is a plain deterministic layer. Other arguments as the other families;
    ``posterior_std`` is ignored."""

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
        rate: float = 0.5,
    ) -> None:
        super().__init__()
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"BinaryDropoutLayer: rate must be in [0, 1), got {rate!r}")
        self._setup(in_features, out_features, generators, kernel_size, bias, dtype)
        self.rate = rate
        self.weight = nn.Parameter(self.initial_mean(generators, dtype))

    def weight_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight, self.weight**2 * (self.rate / (1.0 - self.rate))

    def _mask(self, generators: ModelGenerators, shape, dtype) -> torch.Tensor:
        threshold = NormalDist().inv_cdf(self.rate) if self.rate > 0 else -float("inf")
        keep = generators.randn(*shape, dtype=dtype) > threshold
        return keep.to(dtype) / (1.0 - self.rate)

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode = ForwardMode.SAMPLE,
        generators: ModelGenerators | None = None,
    ) -> torch.Tensor:
        self.operator.check(x, self.num_models)
        mode = ForwardMode(mode)
        if mode is not ForwardMode.MEAN and self.rate > 0:
            generators = require_generators(generators, mode)
            # SAMPLE: per example; WEIGHTS: one mask per model, shared by the examples
            shape = x.shape[1:] if mode is ForwardMode.SAMPLE else (1, *x.shape[2:])
            x = x * self._mask(generators, shape, x.dtype)
        return self.operator.apply(x, self.weight, self._bias())

    def kl(self, prior: object) -> torch.Tensor:
        return torch.zeros(self.num_models, dtype=self.weight.dtype)
