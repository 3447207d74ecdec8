"""Uniform variance layer: w = theta eps, eps ~ U(-1, 1) (Neklyudov et al. 2019 section 3.3).

E[w] = 0, Var[w] = theta^2 / 3. No exact LRT: LOCAL draws one weight sample per model, shared by
the examples (``moment_matching=True`` draws the pre-activation from the Gaussian with the output's
exact moments instead, see ``bernoulli_variance``). U(-1, 1) noise is erf(z / sqrt 2), z ~ N(0, 1),
which is exactly uniform.

KL: the table's entry for ``ScaledUniform`` and the prior (``priors.kl``). Against the
log-uniform or ARD (scale-invariant) prior, KL(theta U || LogU) = -log(2 theta) + E log|theta eps|
+ C does not depend on theta: returned as 0. Against N(0, s^2) and the Student-t, closed forms
(``priors.gaussian``, ``priors.student_t``).
"""

from __future__ import annotations

import math

import torch

from vbnn.core.randomness import NoiseSource
from vbnn.layers.bernoulli_variance import BernoulliVariance
from vbnn.priors.kl import ScaledUniform, kl_divergence
from vbnn.priors.log_uniform import LogUniformPrior


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
        """KL(theta U(-1, 1) || prior), (M,) (0 for a scale-invariant prior, closed forms for the
        Gaussian and the Student-t)."""
        return kl_divergence(ScaledUniform(self.weight_log_scale), prior)
