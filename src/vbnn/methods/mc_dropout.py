"""MC dropout (Gal & Ghahramani 2016): the network trained by maximum likelihood with its own
dropout layers, and K passes with those layers kept active at test time."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from vbnn.core.batch_rule import Inputs, rows
from vbnn.methods.base import Draw, Fitted, Method
from vbnn.methods.passes import passes

DROPOUT = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def dropout_layers(network: nn.Module) -> list[str]:
    """Paths of the dropout layers of ``network``."""
    return [path for path, module in network.named_modules() if isinstance(module, DROPOUT)]


def dropout_samples(network: nn.Module, x: Inputs, run: Any, seed: int) -> torch.Tensor:
    """K = ``run.samples`` passes with the dropout layers active and everything else in
    ``.eval()`` mode, the masks drawn from torch's RNG seeded by ``seed``: (K, N, ...)."""
    network.eval()
    for module in network.modules():
        if isinstance(module, DROPOUT):
            module.train()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return passes(network, x, run.samples, run.batch_size or rows(x))
    finally:
        network.eval()


@dataclass(frozen=True)
class MCDropout(Method):
    """Dropout kept active at test time (module docstring)."""

    def check(self, network: nn.Module, example: torch.Tensor, run: Any) -> None:
        if not dropout_layers(network):
            raise ValueError(
                f"{type(network).__name__} has no dropout layer (nn.Dropout, "
                "nn.Dropout2d, ...) to keep active at test time"
            )
        super().check(network, example, run)

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        return partial(dropout_samples, fitted.network, run=run, seed=seed), 0.0
