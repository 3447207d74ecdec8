"""Bernoulli variance layer: w = theta (2 eps - 1), eps ~ Bernoulli(1/2) (Neklyudov et al. 2019
section 3.3).

E[w] = 0 and Var[w] = theta^2. There is no exact local reparameterization trick for this noise, so
LOCAL draws one weight sample per model, shared by the examples of the batch (as WEIGHTS does).
Moment matching (fast dropout, Wang & Manning 2013) is available with ``moment_matching=True``: the
pre-activation is then drawn from the Gaussian with the exact mean (0) and variance
(A^2 * theta^2) of the Bernoulli layer's output, i.e. the layer trains as a Gaussian variance layer
(Neklyudov et al. 2019: "Under fast dropout approximation all three cases would be equivalent to a
Gaussian variance layer"). The +-1 noise is sign(z) for z ~ N(0, 1) from the model's noise source.

KL: q is discrete, so its KL to any density is infinite but does not depend on theta; with the
log-uniform or ARD prior (scale-invariant: ``scale_invariant``) we drop it (return 0, like the
Gaussian variance layer); others raise, the Student-t among them.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ParameterRole
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import VariationalLayer
from vbnn.priors.log_uniform import LogUniformPrior


class BernoulliVariance(VariationalLayer):
    """theta (2 Bernoulli(1/2) - 1) weights; dense, or a convolution when ``kernel_size`` is set.

    The other arguments are those of ``VariationalDropout``.

    Args:
        init_std: the marginal posterior std at initialisation (here theta); None:
            1 / sqrt(fan_in).
        moment_matching: LOCAL uses the Gaussian with the output's exact moments.
    """

    family_name = "bernoulli-variance"
    has_weight_mean = False
    roles = MappingProxyType({"bias": ParameterRole.MEAN})
    default_prior: object = LogUniformPrior()
    noise_variance = 1.0  # Var(2 eps - 1)

    # Parameters: the layer's shape, then the family's options, each a named parameter: the
    # registry reads a family's options from this signature (``FamilySpec.accepted_options``)
    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        init_std: float | None = None,
        dtype: torch.dtype | None = None,
        *,
        moment_matching: bool = False,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        if init_std is not None and not init_std > 0:
            raise ValueError(f"{type(self).__name__}: init_std must be > 0, got {init_std}")
        self.point_bias(dtype)
        dtype = dtype or torch.get_default_dtype()
        self.exact_lrt = moment_matching
        shape = self.operator.weight_shape(self.num_models)
        if init_std is None:
            init_std = 1.0 / math.sqrt(self.operator.fan_in())
        start = math.log(init_std / math.sqrt(self.noise_variance))
        spread = 0.1 * self.init_noise.randn(*shape[1:], dtype=dtype)
        self.weight_log_scale = nn.Parameter(start + spread)

    def unit_noise(self, noise: NoiseSource, like: torch.Tensor) -> torch.Tensor:
        """+-1 draws (M, *like.shape[1:]): Var = 1."""
        return torch.sign(noise.randn(*like.shape[1:], dtype=like.dtype, device=like.device))

    def weight_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        var = torch.exp(2.0 * self.weight_log_scale) * self.noise_variance
        return torch.zeros_like(var), var

    def sample_weight(self, noise: NoiseSource) -> torch.Tensor:
        scale = self.weight_log_scale.exp()
        return scale * self.unit_noise(noise, scale)

    def kl(self, prior: object) -> torch.Tensor:
        """0 for a scale-invariant prior (log-uniform, ARD), where the infinite KL of a discrete q
        does not depend on theta; an error for any other (its KL is infinite and, e.g. for the
        Student-t, the part that depends on theta is not a constant to drop)."""
        if getattr(prior, "scale_invariant", False):
            return self.weight_log_scale.new_zeros(self.num_models)
        raise TypeError(
            f"{type(self).__name__}: KL to {type(prior).__name__} is infinite (discrete q); "
            "use LogUniformPrior or ARDPrior, whose KL is dropped as a constant"
        )
