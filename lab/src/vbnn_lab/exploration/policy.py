"""Policies with parameter noise fixed for a whole episode (Neklyudov et al. 2019 section 6.2).

The policy is a stack of M MLPs (one per seed) with three hidden layers of 256 ReLU units and a
softmax over the actions. The second hidden layer is one of

* ``deterministic``: point weights;
* ``parameter-noise``: Gaussian weights N(mu, sigma^2), both learned (Fortunato et al. 2017,
  "independent Gaussian noise"; Plappert et al. 2017 perturb the same way): the ``mf`` family,
  sigma initialised at 0.017 as Fortunato et al.;
* ``variance``: the Gaussian variance layer N(0, sigma^2) of Neklyudov et al. 2019 section 3
(``zero-mean``).

"Individual samples of noise per episode": one weight matrix is drawn per model at the start of an
episode, through ``ForwardMode.WEIGHTS``, and kept for every step; the rollout draws it through a
recording ``NoiseTape`` and the policy-gradient pass replays the tape.
"""

from __future__ import annotations

from enum import Enum

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.registry import family

HIDDEN = 256
FORTUNATO_SIGMA = 0.017  # initial sigma of independent Gaussian noise (Fortunato et al. 2017)


class PolicyNoise(str, Enum):
    """The second hidden layer of the policy."""

    DETERMINISTIC = "deterministic"
    PARAMETER_NOISE = "parameter-noise"
    VARIANCE = "variance"


FAMILY_OF = {
    PolicyNoise.DETERMINISTIC: ("point", {}),
    PolicyNoise.PARAMETER_NOISE: ("mf", {"init_std": FORTUNATO_SIGMA}),
    PolicyNoise.VARIANCE: ("zero-mean", {}),
}


class Policy(nn.Module):
    """A stack of M policies: observations (M, N, D) -> action logits (M, N, A)."""

    def __init__(
        self, observations: int, actions: int, noise: PolicyNoise, generators: ModelGenerators
    ) -> None:
        super().__init__()
        self.noise = PolicyNoise(noise)
        name, options = FAMILY_OF[self.noise]
        sizes = [(observations, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, actions)]
        self.layers = nn.ModuleList(
            family(name if index == 1 else "point").build(
                i, o, generators, **(options if index == 1 else {})
            )
            for index, (i, o) in enumerate(sizes)
        )

    def weights(self, noise: NoiseSource) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """The episode's (weight, bias) of every layer: the noisy layer's draw from ``noise``, the
        others' point weights. Drawn once per episode for the rollout (through a recording
        ``NoiseTape``) and once, with gradients, for the update (from its replay: the same
        numbers)."""
        noisy = 1 if self.noise is not PolicyNoise.DETERMINISTIC else None
        return [
            layer.effective_sample(noise) if index == noisy else layer.effective_means()
            for index, layer in enumerate(self.layers)
        ]

    def logits(
        self, x: torch.Tensor, weights: list[tuple[torch.Tensor, torch.Tensor | None]]
    ) -> torch.Tensor:
        """Observations (M, N, D) -> logits (M, N, A) with the given weights (the same output as
        every layer's ``forward`` in ``ForwardMode.WEIGHTS`` with the episode's noise)."""
        for index, (layer, (weight, bias)) in enumerate(zip(self.layers, weights, strict=True)):
            x = layer.operator.apply(x, weight, bias)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x

    def forward(self, x: torch.Tensor, noise: NoiseSource) -> torch.Tensor:
        """Logits through every layer's own forward in ``ForwardMode.WEIGHTS``, drawing from
        ``noise`` (slow: ``logits`` with ``weights`` is the fast path; a replayed tape gives the
        episode's weights)."""
        for index, layer in enumerate(self.layers):
            x = layer(x, ForwardMode.WEIGHTS, noise)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x
