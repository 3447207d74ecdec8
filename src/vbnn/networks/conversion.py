"""Any ``nn.Module`` made Bayesian: its dense and convolutional layers replaced by a family's.

``convert(module, "mf")`` returns a deep copy of ``module`` in which every ``nn.Linear``,
``nn.Conv1d``, ``nn.Conv2d``, ``nn.Conv3d``, ``nn.ConvTranspose1d``, ``nn.ConvTranspose2d`` and
``nn.ConvTranspose3d`` (and HuggingFace's ``Conv1D``, GPT-2's dense layer, as the
``nn.Linear`` of its transposed weight) is the family's layer of the same shape (one network, no
model dimension),
its posterior means set from the original weights and biases (``VariationalLayer.load_means``),
on the original device and dtype. A converted transposed convolution takes ``output_size`` in
its call as ``nn.ConvTransposeNd`` does. The rest of the module
(activations, pooling, normalisation, the ``forward``) is untouched, so the converted model is
called as the original module: it samples in training mode and uses the posterior means in eval
mode or under ``vbnn.mode``.

No layer is left deterministic in silence:

* normalisation layers (BatchNorm, InstanceNorm, LayerNorm, GroupNorm, RMSNorm) stay
  deterministic by design, their scale and shift point estimates; ``vbnn.summary`` lists them;
* ``nn.LSTM``, ``nn.GRU``, ``nn.RNN`` and ``nn.MultiheadAttention`` (inside every
  ``nn.Transformer*Layer``) become variational modules of the same family, a weight draw shared
  by the time steps of a sequence (one per minibatch, or ``draw="sequence"``), and the
  transformer layers lose their weight-reading fast path
  (``networks.sequence_conversion``);
* any other module holding parameters that convert does not replace (``nn.Embedding``, a
  parameter of a custom module, ...) is named in one ``UserWarning``, or a ValueError with
  ``strict=True``, unless it is kept;
* the converted copy records the ``keep`` paths in its attribute ``vbnn_kept`` (a tuple, kept by
  ``deepcopy`` and pickling), so that ``vbnn.summary`` gives every deterministic module its
  reason: a normalisation layer "by design", a kept one "kept", any other "not convertible".
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable
from typing import Any

from torch import nn

from vbnn.layers.registry import FamilySpec
from vbnn.layers.registry import family as family_spec
from vbnn.layers.shell import VariationalLayer
from vbnn.networks.adapter import LoRA, add_adapters
from vbnn.networks.sequence_conversion import (
    SEQUENCE_MODULES,
    convert_sequence_modules,
    sequence_module,
    sequence_paths,
)
from vbnn.networks.summary import KEPT_ATTRIBUTE, NORMALISATION
from vbnn.networks.summary import summary as summary_table
from vbnn.networks.summary import under as _under

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
TRANSPOSED_CONVOLUTIONS = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
CONVERTIBLE = (nn.Linear, *CONVOLUTIONS, *TRANSPOSED_CONVOLUTIONS)


def _transposed_dense(module: nn.Module) -> bool:
    """Whether ``module`` is HuggingFace's ``Conv1D`` (GPT-2's dense layer: weight (in, out),
    y = x W + b), recognised by its class without importing transformers."""
    kind = type(module)
    return kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers.")


def _convertible(module: nn.Module) -> bool:
    """Whether convert replaces ``module``: a dense or a 1-3-D (transposed) convolutional torch
    layer, or HuggingFace's ``Conv1D``."""
    if isinstance(module, VariationalLayer):
        return False
    return isinstance(module, CONVERTIBLE) or _transposed_dense(module)


def _family_layer(spec: FamilySpec, name: str, layer: nn.Module, options: dict[str, Any]):
    weight, bias = layer.weight, layer.bias
    shape: dict[str, Any] = {}
    if isinstance(layer, CONVOLUTIONS + TRANSPOSED_CONVOLUTIONS):
        kind = type(layer).__name__
        label = name or "the layer"  # "": a bare layer, no path to keep
        if not spec.convolution:
            raise ValueError(
                f"convert: {label} is an nn.{kind}; family {spec.name!r} is dense only"
            )
        if layer.groups != 1 or layer.padding_mode != "zeros":
            advice = f"keep it deterministic with keep=[{name!r}]" if name else "it stays as it is"
            raise ValueError(
                f"convert: {label} ({kind}) has groups={layer.groups}, padding_mode="
                f"{layer.padding_mode!r}; only groups=1 with zero padding is supported ({advice})"
            )
        shape = {"kernel_size": layer.kernel_size, "stride": layer.stride,
                 "padding": layer.padding, "dilation": layer.dilation}  # fmt: skip
        if isinstance(layer, TRANSPOSED_CONVOLUTIONS):
            shape |= {"transposed": True, "output_padding": layer.output_padding}
        sizes = (layer.in_channels, layer.out_channels)
    elif _transposed_dense(layer):  # y = x W + b with W (in, out): nn.Linear's weight is W^T
        sizes, weight = tuple(weight.shape), weight.T
    else:
        sizes = (layer.in_features, layer.out_features)
    new = spec.build(*sizes, None, dtype=weight.dtype, bias=bias is not None, **shape, **options)
    new.load_means(weight.detach(), None if bias is None else bias.detach())
    return new.to(weight.device)


def _replaceable(module: nn.Module, keep: set[str]) -> set[str]:
    """Every path of a convertible layer not under ``keep``; a layer shared by several paths
    (weight tying) is listed at each, and kept at some paths but not others is an error."""
    paths: dict[int, list[str]] = {}
    for name, child in module.named_modules(remove_duplicate=False):
        if _convertible(child):
            paths.setdefault(id(child), []).append(name)
    replaceable = set()
    for names in paths.values():
        kept = [name for name in names if _under(name, keep)]
        if kept and len(kept) < len(names):
            raise ValueError(
                f"convert: one layer is shared by {names}, but keep covers only {kept}; keep "
                f"all of its paths or none"
            )
        if not kept:
            replaceable.update(names)
    return replaceable


def _left_deterministic(module: nn.Module, keep: set[str]) -> list[tuple[str, nn.Module]]:
    """Modules outside ``keep`` holding parameters of their own that convert does not replace,
    that are not normalisation layers and not inside a variational layer."""
    variational = [p for p, m in module.named_modules() if isinstance(m, VariationalLayer)]
    left = []
    for path, child in module.named_modules():
        if _under(path, keep) or _under(path, variational) or _convertible(child):
            continue
        if isinstance(child, NORMALISATION) or next(child.parameters(False), None) is None:
            continue
        left.append((path, child))
    return left


def convert(
    module: nn.Module,
    family: str = "mf",
    keep: Iterable[str] = (),
    *,
    strict: bool = False,
    summary: bool = False,
    adapter: LoRA | None = None,
    **options: Any,
) -> nn.Module:
    """A copy of ``module`` whose ``nn.Linear``, ``nn.Conv1d`` / ``2d`` / ``3d`` and
    ``nn.ConvTranspose1d`` / ``2d`` / ``3d`` layers (and HuggingFace ``Conv1D``s) are ``family``
    layers (the module docstring says what else happens to each layer).

    Args:
        module: any ``nn.Module`` (left unchanged).
        family: a ``vbnn.FAMILIES`` name ("mf", "gd", "fc", "vd-layer", "zero-mean", ...).
        keep: paths (as in ``module.named_modules()``) of modules to leave deterministic, with
            everything inside them: a layer, an ``nn.MultiheadAttention``, a whole block; ""
            names the root module's own parameters (a bare layer: the layer).
        strict: raise instead of warning when a module holding parameters (other than a
            normalisation layer) is left deterministic without being kept.
        summary: print ``vbnn.summary`` of the converted copy (path, type, family, parameters).
        adapter: a ``vbnn.LoRA``: instead of converting the layers, give the targeted dense
            layers a low-rank adapter whose factors are of ``family`` and freeze every
            pretrained weight (``networks.adapter``; ``keep`` does not apply).
        **options: passed to every new layer, e.g. ``init_std=1e-3`` (the marginal posterior
            std of every weight at initialisation), ``std=1e-3`` for "gd" (its fixed posterior
            std), ``log_alpha=-6.0`` for variational dropout, ``parameterization="softplus"``
            for "mf"; ``draw="sequence"`` goes to the recurrent and attention modules only
            (one weight draw per sequence instead of one per minibatch).

    Returns:
        The converted copy; its KL is ``vbnn.kl(model)`` (each family's default prior, or pass
        one), its ELBO ``vbnn.elbo(model, likelihood, prior, x, y, dataset_size=N)``.

    Raises:
        ValueError: an unknown family (the choices are listed), an option the family does not
            take (named, with the options it takes), a ``keep`` path that is not a module of
            ``module``, a (transposed) convolution the family or the shell cannot express (a
            dense-only family, grouped, a padding mode other than zeros; its path named), a
            recurrent or attention option that is not supported (``proj_size``, ``add_bias_kv``,
            ``add_zero_attn``; its path named), nothing to convert, or, with ``strict=True``, a
            module left deterministic (every path named).

    Warns:
        UserWarning: naming the path and type of every module holding parameters that stays
            deterministic without being kept (normalisation layers excepted).
    """
    spec = family_spec(family)
    keep = set(keep)
    if adapter is not None:
        converted = add_adapters(module, spec, adapter, keep, options)
        if summary:
            print(summary_table(converted))
        return converted
    if _convertible(module) and "" not in keep:  # a bare layer
        converted = _family_layer(spec, "", module, dict(options))
        if summary:
            print(summary_table(converted))
        return converted
    if isinstance(module, SEQUENCE_MODULES) and "" not in keep:  # a bare recurrent or attention
        converted = sequence_module(spec, "", module, dict(options))
        if summary:
            print(summary_table(converted))
        return converted
    paths = {name for name, _ in module.named_modules()}
    unknown = sorted(keep - paths)
    if unknown:
        layers = sorted(name for name, child in module.named_modules() if _convertible(child))
        raise ValueError(
            f"convert: keep={unknown} are not modules of {type(module).__name__}; its "
            f"convertible layers are {layers}"
        )
    sequences = sequence_paths(module, keep)
    sequence_options = dict(options)
    if "draw" in options:  # the recurrent and attention modules' option, not a layer's
        if not sequences:
            raise ValueError(
                f"convert: draw={options['draw']!r} is an option of recurrent and attention "
                f"modules, and {type(module).__name__} has none to convert"
            )
        options = {name: value for name, value in options.items() if name != "draw"}
    replaceable = _replaceable(module, keep)
    if not replaceable and not sequences:
        raise ValueError(
            f"convert: {type(module).__name__} has no nn.Linear/nn.Conv1d/2d/3d/"
            f"nn.ConvTranspose1d/2d/3d, recurrent or attention layer to convert"
        )
    left = _left_deterministic(module, keep | set(sequences))
    if left:
        named = ", ".join(f"{path or '(root)'} ({type(child).__name__})" for path, child in left)
        message = (
            f"convert: these modules hold parameters and stay deterministic: {named}; "
            f"pass keep={[path for path, _ in left]} to keep them so on purpose"
        )
        if strict:
            raise ValueError(message)
        warnings.warn(message, UserWarning, stacklevel=2)
    converted = copy.deepcopy(module)  # keeps a layer shared by several paths shared
    converted = convert_sequence_modules(converted, sequences, spec, keep, sequence_options)
    made: dict[int, nn.Module] = {}  # one variational layer per original layer: ties stay tied
    for parent_name, parent in list(converted.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent._modules.items()):  # shared children too
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if name in replaceable and _convertible(child):
                if id(child) not in made:
                    made[id(child)] = _family_layer(spec, name, child, dict(options))
                setattr(parent, child_name, made[id(child)])
    setattr(converted, KEPT_ATTRIBUTE, tuple(sorted(keep)))  # ``vbnn.summary``'s reasons
    if summary:
        print(summary_table(converted))
    return converted
