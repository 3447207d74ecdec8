"""Binary dropout baseline (Srivastava et al. 2014), the "Dropout" rows of Neklyudov et al. 2019
Table 2.

Point weights W; the inputs of the layer are multiplied by z / (1 - p), z ~ Bernoulli(1 - p)
(inverted dropout), independently per example and input unit (per input element for conv) in
LOCAL mode. WEIGHTS (and ZERO_MEAN) draws one mask per model shared by the examples (one "weight
sample": rows of W zeroed). MEAN is the weight-scaling rule (eq. 3 of Neklyudov et al. 2019): no
mask. There is no KL (the baseline is trained by maximum likelihood): ``kl`` returns zeros. The
implied weight marginal has mean W and variance W^2 p / (1 - p), which ``posterior_std()``
reports. A Bernoulli(1 - p) draw is z > Phi^-1(p) for a standard normal z from the model's noise
source.
"""

from __future__ import annotations

from statistics import NormalDist
from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, ParameterRole
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import Moments, VariationalLayer


class BinaryDropout(VariationalLayer):
    """Dense, or a convolution when ``kernel_size`` is set, with binary dropout of rate ``rate`` in
    (0, 1) on its input (a layer without dropout is ``Point``). Other arguments as the other
    families."""

    family_name = "dropout"
    roles = MappingProxyType({"weight": ParameterRole.MEAN, "bias": ParameterRole.MEAN})
    has_zero_mean_form = False  # Bernoulli masks, not N(mu, var): the layer stays as it is
    has_kl = False

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        *,
        rate: float = 0.5,
        **shell,
    ) -> None:
        if not 0.0 < rate < 1.0:
            raise ValueError(
                f"BinaryDropout: rate must be in (0, 1), got {rate!r} (no dropout: use Point)"
            )
        super().__init__(in_features, out_features, generators, **shell)
        self.rate = rate
        self.point_bias(dtype)
        self.weight = nn.Parameter(self.initial_mean(dtype))

    def means(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.weight, self.bias

    def weight_moments(self) -> Moments:
        return self.weight, self.weight**2 * (self.rate / (1.0 - self.rate))

    def _mask(self, noise: NoiseSource, shape, like: torch.Tensor) -> torch.Tensor:
        threshold = NormalDist().inv_cdf(self.rate)
        keep = noise.randn(*shape, dtype=like.dtype, device=like.device) > threshold
        return keep.to(like.dtype) / (1.0 - self.rate)

    def sample(self, noise: NoiseSource) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One dense weight draw per model: W with row i scaled by z_i / (1 - p), the weight
        that one input mask per model (WEIGHTS mode) gives, from the same noise; the same mask
        for every step of a sequence is the recurrent dropout of Gal & Ghahramani (2016).

        Raises:
            NotImplementedError: for a convolution (its mask is per input element, not a
                weight).
        """
        if self.operator.is_conv:
            raise NotImplementedError(
                f"BinaryDropout({self.extra_repr()}): a convolution's mask is per input element "
                f"and has no weight form"
            )
        mask = self._mask(noise, (self.in_features, 1), self.weight)
        return self.weight * mask, self.bias

    def propagate(self, x: torch.Tensor, mode: ForwardMode, noise: NoiseSource) -> torch.Tensor:
        if mode is not ForwardMode.MEAN:
            # LOCAL: per example; WEIGHTS, ZERO_MEAN: one mask per model, shared by the examples
            shape = x.shape[1:] if mode is ForwardMode.LOCAL else (1, *x.shape[2:])
            x = x * self._mask(noise, shape, x)
        return self.operator.apply(x, *self.effective_means())

    def kl(self, prior: object) -> torch.Tensor:
        return self.weight.new_zeros(self.num_models)
