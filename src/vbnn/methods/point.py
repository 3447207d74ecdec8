"""The network as given, trained by maximum likelihood: ``point`` and the deep ensemble.

``point`` stops early on held-out training examples and predicts with one pass (K = 1).
``ensemble`` is M such networks, each from its own initial weights and minibatch order (a deep
ensemble, Lakshminarayanan et al. 2017): the K = M samples are the members' outputs, so the
predictive is the average of the members' predictive distributions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from vbnn.core.batch_rule import Inputs, rows
from vbnn.methods.base import Draw, Fitted, Method
from vbnn.methods.passes import passes


def point_samples(network: nn.Module, x: Inputs, run: Any) -> torch.Tensor:
    """One pass of the trained network in ``.eval()`` mode: (1, N, ...)."""
    network.eval()
    return passes(network, x, 1, run.batch_size or rows(x))


@dataclass(frozen=True)
class Point(Method):
    """Maximum likelihood, one pass a member (module docstring)."""

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        return partial(point_samples, fitted.network, run=run), 0.0
