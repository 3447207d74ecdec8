"""Switches over every family layer of a module: the mode, the noise, and what a module takes.

``use_mode(module, mode)`` and ``use_noise(module, noise)`` set, for the duration of a block, the
forward mode and the noise source of every ``VariationalLayer`` inside ``module`` (itself
included); ``variational_layers``, ``stack_size`` and ``takes_mode`` read a module's layers.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import NoiseSource
from vbnn.layers.shell import VariationalLayer


def variational_layers(module: nn.Module) -> list[VariationalLayer]:
    """Every family layer inside ``module`` (itself included), in module order."""
    return [m for m in module.modules() if isinstance(m, VariationalLayer)]


def stack_size(module: nn.Module) -> int | None:
    """M of a stack of models; None for one network (or a module with no family layer).

    Raises:
        ValueError: ``module`` holds single layers beside stacked ones.
    """
    layers = variational_layers(module)
    sizes = {layer.num_models if layer.stacked else None for layer in layers}
    if len(sizes) > 1:
        raise ValueError(f"{type(module).__name__} mixes stacks and single layers: {sizes}")
    return sizes.pop() if sizes else None


@contextmanager
def use_mode(module: nn.Module, mode: ForwardMode | str) -> Iterator[nn.Module]:
    """Within the block every family layer of ``module`` runs in ``mode`` unless a call names one.

    ``mode`` is "mean", "sample", "weights", or "zero-mean" (sampled weights with each N(mu, var)
    replaced by N(0, var): Neklyudov et al. 2019 Theorem 1).
    """
    zero_mean = mode == "zero-mean"
    forward_mode = ForwardMode.WEIGHTS if zero_mean else ForwardMode(mode)
    layers = variational_layers(module)
    previous = [(layer.forced_mode, layer.zero_mean_approximation) for layer in layers]
    try:
        for layer in layers:
            layer.forced_mode = forward_mode
            layer.zero_mean_approximation = zero_mean or layer.zero_mean_approximation
        yield module
    finally:
        for layer, (forced, zero) in zip(layers, previous, strict=True):
            layer.forced_mode, layer.zero_mean_approximation = forced, zero


def takes_mode(module: nn.Module) -> bool:
    """Whether ``module`` is called as ``module(x, mode, generators)``: family layers, the
    package's networks, and any module whose ``forward`` has a ``mode`` parameter."""
    if isinstance(module, VariationalLayer) or getattr(module, "takes_mode", False):
        return True
    try:
        return "mode" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


@contextmanager
def use_noise(module: nn.Module, noise: NoiseSource | None) -> Iterator[nn.Module]:
    """Within the block every family layer of ``module`` draws from ``noise`` (e.g. a
    ``ModelGenerators``) unless a call passes its own; None changes nothing. This is how a
    trainer gives a plain ``nn.Module`` (an ``nn.Sequential``) seeded per-model streams."""
    layers = variational_layers(module) if noise is not None else []
    previous = [layer.shared_noise for layer in layers]
    try:
        for layer in layers:
            layer.shared_noise = noise
        yield module
    finally:
        for layer, value in zip(layers, previous, strict=True):
            layer.shared_noise = value
