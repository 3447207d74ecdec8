"""Forward passes of a trained network that several methods' predictives share."""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.batch_rule import Inputs, apply, predict, rows, take


def device_of(network: nn.Module) -> torch.device:
    """Where ``network``'s parameters are (the CPU for a network without any)."""
    parameter = next(network.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def on_device(network: nn.Module, x: Inputs) -> Inputs:
    """``x`` (a tensor or a mapping of them) moved to ``network``'s device."""
    device = device_of(network)
    return apply(x, lambda values: values.to(device))


@torch.no_grad()
def passes(network: nn.Module, x: Inputs, count: int, batch_size: int) -> torch.Tensor:
    """``count`` forward passes of ``network`` as it stands (its train/eval state), ``batch_size``
    examples at a time, their predictions by the batch rule (``core.batch_rule``): (count, N,
    ...), on the CPU."""
    x = on_device(network, x)
    starts = range(0, rows(x), batch_size)
    return torch.stack(
        [
            torch.cat([predict(network, take(x, slice(s, s + batch_size))) for s in starts])
            for _ in range(count)
        ]
    ).cpu()
