"""Any ``nn.Module`` made Bayesian: its dense and convolutional layers replaced by a family's.

``convert(module, "mf")`` returns a deep copy of ``module`` in which every ``nn.Linear`` and
``nn.Conv2d`` is the family's layer of the same shape (one network, no model dimension), its
posterior means set from the original weights and biases (``VariationalLayer.load_means``), on
the original device and dtype. The rest of the module (activations, pooling, normalisation, the
``forward``) is untouched, so the converted model is called exactly as before: it samples in
training mode and uses the posterior means in eval mode or under ``vbnn.mode``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from torch import nn

from vbnn.layers.registry import FamilySpec
from vbnn.layers.registry import family as family_spec
from vbnn.layers.shell import VariationalLayer


def _family_layer(spec: FamilySpec, name: str, layer: nn.Module, options: dict[str, Any]):
    weight, bias = layer.weight, layer.bias
    shape: dict[str, Any] = {}
    if isinstance(layer, nn.Conv2d):
        if not spec.convolution:
            raise ValueError(f"convert: {name} is an nn.Conv2d; family {spec.name!r} is dense only")
        if layer.groups != 1 or layer.padding_mode != "zeros":
            raise ValueError(
                f"convert: {name} has groups={layer.groups}, padding_mode="
                f"{layer.padding_mode!r}; only groups=1 with zero padding is supported"
            )
        if isinstance(layer.padding, str):
            if layer.padding != "valid":
                raise ValueError(f"convert: {name} has padding={layer.padding!r}; give integers")
            padding: Any = 0
        else:
            padding = layer.padding
        shape = {"kernel_size": layer.kernel_size, "stride": layer.stride,
                 "padding": padding, "dilation": layer.dilation}  # fmt: skip
        sizes = (layer.in_channels, layer.out_channels)
    else:
        sizes = (layer.in_features, layer.out_features)
    new = spec.build(*sizes, None, dtype=weight.dtype, bias=bias is not None, **shape, **options)
    new.load_means(weight.detach(), None if bias is None else bias.detach())
    return new.to(weight.device)


def convert(
    module: nn.Module, family: str = "mf", keep: Iterable[str] = (), **options: Any
) -> nn.Module:
    """A copy of ``module`` whose ``nn.Linear`` / ``nn.Conv2d`` layers are ``family`` layers.

    Args:
        module: any ``nn.Module`` (left unchanged).
        family: a ``vbnn.FAMILIES`` name ("mf", "gd", "fc", "vd-layer", "zero-mean", ...).
        keep: names (as in ``module.named_modules()``) of layers to leave deterministic.
        **options: passed to every new layer, e.g. ``posterior_std=1e-3`` (the initial marginal
            std of every weight; GD: its fixed std), ``log_alpha=-6.0`` for variational dropout,
            ``parameterization="softplus"`` for "mf".

    Returns:
        The converted copy; its KL is ``vbnn.kl(model)`` (each family's default prior, or pass
        one), its ELBO ``vbnn.elbo(model, likelihood, prior, x, y, dataset_size=N)``.

    Raises:
        ValueError: an unknown family (the choices are listed), an option the family does not
            take (named, with the options it takes), a ``keep`` name that is not a
            dense or convolutional layer of ``module``, a convolution the family or the shell
            cannot express (grouped, non-zero padding mode, "same" padding).
    """
    spec = family_spec(family)
    keep = set(keep)
    if isinstance(module, (nn.Linear, nn.Conv2d)) and "" not in keep:  # a bare layer
        return _family_layer(spec, type(module).__name__, module, dict(options))
    replaceable = {
        name
        for name, child in module.named_modules()
        if isinstance(child, (nn.Linear, nn.Conv2d)) and not isinstance(child, VariationalLayer)
    }
    unknown = sorted(keep - replaceable)
    if unknown:
        raise ValueError(
            f"convert: keep={unknown} are not nn.Linear/nn.Conv2d layers of "
            f"{type(module).__name__}; its layers are {sorted(replaceable)}"
        )
    if not replaceable - keep:
        raise ValueError(f"convert: {type(module).__name__} has no nn.Linear/nn.Conv2d to convert")
    converted = copy.deepcopy(module)
    for parent_name, parent in list(converted.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if name in replaceable and name not in keep:
                setattr(parent, child_name, _family_layer(spec, name, child, dict(options)))
    return converted
