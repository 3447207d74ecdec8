"""Uniform variance layer: w = theta eps, eps ~ U(-1, 1) (Neklyudov et al. 2019 section 3.3).

E[w] = 0, Var[w] = theta^2 / 3. No exact LRT: LOCAL draws one weight sample per model, shared by
the examples (``moment_matching=True`` draws the pre-activation from the Gaussian with the output's
exact moments instead, see ``bernoulli_variance``). U(-1, 1) noise is erf(z / sqrt 2), z ~ N(0, 1),
which is exactly uniform.

KL: against the log-uniform (scale-invariant) prior, KL(theta U || LogU) = -log(2 theta)
+ E log|theta eps| + C does not depend on theta: returned as 0. Against N(0, s^2), the closed form
KL = -log(2 theta) + 1/2 log(2 pi s^2) + theta^2 / (6 s^2).
"""

from __future__ import annotations

import math

import torch

from vbnn.core.contracts import DropoutPrior
from vbnn.core.randomness import NoiseSource
from vbnn.layers.bernoulli_variance import BernoulliVariance
from vbnn.priors.dropout import LogUniformPrior


class UniformVariance(BernoulliVariance):
    """theta U(-1, 1) weights; dense, or a convolution when ``kernel_size`` is set (arguments as the
    Bernoulli layer; ``init_std`` is the marginal posterior std at initialisation, theta / sqrt 3).
    """

    family_name = "uniform-variance"
    default_prior: object = LogUniformPrior()
    noise_variance = 1.0 / 3.0

    def unit_noise(self, noise: NoiseSource, like: torch.Tensor) -> torch.Tensor:
        """U(-1, 1) draws (M, *like.shape[1:]): Var = 1/3."""
        draw = noise.randn(*like.shape[1:], dtype=like.dtype, device=like.device)
        return torch.erf(draw / math.sqrt(2.0))

    def kl(self, prior: object) -> torch.Tensor:
        if isinstance(prior, DropoutPrior):
            return self.weight_log_scale.new_zeros(self.num_models)
        if hasattr(prior, "std"):
            prior_var = float(prior.std) ** 2
            scale = self.weight_log_scale
            terms = (
                -(math.log(2.0) + scale)
                + 0.5 * math.log(2.0 * math.pi * prior_var)
                + torch.exp(2.0 * scale) / (6.0 * prior_var)
            )
            return terms.reshape(self.num_models, -1).sum(1)
        raise TypeError(f"UniformVariance: no KL to {type(prior).__name__}")
