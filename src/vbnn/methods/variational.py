"""A family's posterior trained on the ELBO: by Adam (every ``vbnn.FAMILIES`` name) or by IVON.

``vbnn.convert(network, family)`` trained by ``vbnn.train`` on the ELBO; the predictive draws K
functions from q, one weight sample each ("weights" mode), p(y | x) = 1/K sum_k p(y | x, W_k)
(Neklyudov et al. 2019 eq. 2). ``ivon`` trains the mean-field posterior by IVON (Shen et al.
2024, ``vbnn.IVON``: the natural-gradient variational online Newton step, at the run's IVON
settings); ``ivon-ensemble`` is M such posteriors from their own initial weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from vbnn.core.batch_rule import Inputs, rows
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.methods.base import Draw, Fitted, Method
from vbnn.methods.passes import device_of, on_device
from vbnn.networks.predictive import sample
from vbnn.training.natural_gradient import IVON


def posterior_samples(network: nn.Module, x: Inputs, run: Any, seed: int) -> torch.Tensor:
    """K = ``run.samples`` functions drawn from q, one weight sample each: (K, N, ...)."""
    network.eval()
    noise = ModelGenerators([seed], device_of(network))
    batch = run.batch_size or rows(x)
    inputs = on_device(network, x)
    return sample(network, inputs, run.samples, ForwardMode.WEIGHTS, batch, noise).cpu()


@dataclass(frozen=True)
class Variational(Method):
    """A family's posterior on the ELBO (module docstring)."""

    def train_options(self, run: Any, network: nn.Module) -> dict[str, Any]:
        if self.optimizer == "ivon":
            return {"optimizer": run.ivon or IVON()}
        return {"optimizer": self.optimizer}

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        return partial(posterior_samples, fitted.network, run=run, seed=seed), 0.0
