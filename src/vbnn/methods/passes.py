"""Forward passes of a trained network that several methods' predictives share."""

from __future__ import annotations

import torch
from torch import nn


def device_of(network: nn.Module) -> torch.device:
    """Where ``network``'s parameters are (the CPU for a network without any)."""
    parameter = next(network.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


@torch.no_grad()
def passes(network: nn.Module, x: torch.Tensor, count: int, batch_size: int) -> torch.Tensor:
    """``count`` forward passes of ``network`` as it stands (its train/eval state), ``batch_size``
    examples at a time: (count, N, ...), on the CPU."""
    x = x.to(device_of(network))
    return torch.stack(
        [
            torch.cat([network(x[s : s + batch_size]) for s in range(0, len(x), batch_size)])
            for _ in range(count)
        ]
    ).cpu()
