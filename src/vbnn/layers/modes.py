"""Switches over every family layer of a module: the mode, the noise, and how a module is called.

``mode(module, m)`` and ``use_noise(module, noise)`` set, for the duration of a block, the forward
mode and the noise source of every ``VariationalLayer`` inside ``module`` (itself included);
``network_output`` runs any module in a given mode with a given noise; ``variational_layers``,
``stack_size`` and ``takes_mode`` read a module's layers; ``as_input`` shapes an input for a
network or a stack.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from vbnn.core import batch_rule
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


def as_input(model: nn.Module | int | None, x: batch_rule.Inputs) -> batch_rule.Inputs:
    """``x`` (N, ...) as ``model`` takes it: unchanged for one network, (M, N, ...) for a stack.

    ``model`` may also be its ``stack_size`` already read (an int, or None for one network), so
    that a training step does not walk the module tree. A mapping of inputs (``core.batch_rule``)
    is for one network.

    Raises:
        ValueError: a mapping of inputs for a stack.
    """
    models = stack_size(model) if isinstance(model, nn.Module) else model
    if models is None:
        return x
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            f"a stack of {models} models takes tensor inputs, not a {type(x).__name__} of "
            "them (mapping batches are for one network)"
        )
    return x.expand(models, *x.shape)


@contextmanager
def mode(module: nn.Module, forward_mode: ForwardMode | str) -> Iterator[nn.Module]:
    """Within the block every family layer of ``module`` runs in ``forward_mode`` (a
    ``ForwardMode`` or its value: "local", "weights", "mean", "zero-mean") unless a call names
    one."""
    forward_mode = ForwardMode(forward_mode)
    layers = variational_layers(module)
    previous = [layer.forced_mode for layer in layers]
    try:
        for layer in layers:
            layer.forced_mode = forward_mode
        yield module
    finally:
        for layer, forced in zip(layers, previous, strict=True):
            layer.forced_mode = forced


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


def takes_mode(module: nn.Module) -> bool:
    """Whether ``module`` is called as ``module(x, mode, noise)``: family layers, the package's
    networks, and any module whose ``forward`` has a ``mode`` parameter."""
    if isinstance(module, VariationalLayer) or getattr(module, "takes_mode", False):
        return True
    try:
        return "mode" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def network_output(
    model: nn.Module,
    x: batch_rule.Inputs,
    forward_mode: ForwardMode | str,
    noise: NoiseSource | None = None,
) -> torch.Tensor:
    """``model``'s output for ``x`` with every family layer in ``forward_mode``, drawing from
    ``noise``.

    Modules that take ``(x, mode, noise)`` (``takes_mode``) get them; any other is called by the
    batch rule (``core.batch_rule``: ``model(x)``, or ``model(**x)`` for a mapping, the logits
    of a ``ModelOutput``) inside ``mode`` and ``use_noise`` (``noise`` None: the layers draw from
    the ``use_noise`` source or torch's global RNG).
    """
    if takes_mode(model):
        return model(x, forward_mode, noise)
    with mode(model, forward_mode), use_noise(model, noise):
        return batch_rule.predict(model, x)
