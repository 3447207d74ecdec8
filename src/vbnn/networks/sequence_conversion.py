"""``vbnn.convert``'s part for sequence models: recurrent layers, attention, transformer layers.

* ``nn.LSTM``, ``nn.GRU``, ``nn.RNN`` become ``VariationalRecurrent`` and ``nn.MultiheadAttention``
  ``VariationalMultiheadAttention``, of the same family, one weight draw per minibatch (or per
  sequence, ``draw="sequence"``; ``layers.sequence_weights``), their posterior means the
  original weights;
* ``nn.TransformerEncoderLayer`` becomes ``VariationalTransformerEncoderLayer`` (no fast path,
  which would read the weights of its sublayers directly), and ``nn.TransformerEncoder`` stops
  nesting tensors (its fast path reads the attention's packed weights);
  ``nn.TransformerDecoderLayer`` and ``nn.TransformerDecoder`` need nothing: their
  attention and feed-forward layers convert as any other.

Every registered family converts them: each draws its weights through its own ``sample``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from vbnn.layers.attention import VariationalMultiheadAttention, VariationalTransformerEncoderLayer
from vbnn.layers.recurrent import VariationalRecurrent
from vbnn.layers.registry import FamilySpec

RECURRENT = (nn.LSTM, nn.GRU, nn.RNN)
SEQUENCE_MODULES = (*RECURRENT, nn.MultiheadAttention)


def sequence_module(spec: FamilySpec, name: str, module: nn.Module, options: dict[str, Any]):
    """The variational copy of a ``SEQUENCE_MODULES`` instance.

    Raises:
        ValueError: a configuration the variational module does not support (``proj_size``,
            ``add_bias_kv``, ``add_zero_attn``), with the path ``name`` of the module.
    """
    target = (
        VariationalRecurrent if isinstance(module, RECURRENT) else VariationalMultiheadAttention
    )
    try:
        return target.from_module(module, spec.name, **options)
    except ValueError as error:
        advice = f"; keep it deterministic with keep=[{name!r}]" if name else ""
        raise ValueError(f"convert: {name or 'the module'}: {error}{advice}") from error


def _under(path: str, roots: set[str]) -> bool:
    return any(path == root or (root and path.startswith(f"{root}.")) for root in roots)


def sequence_paths(module: nn.Module, keep: set[str]) -> list[str]:
    """The paths of the outermost ``SEQUENCE_MODULES`` of ``module`` outside ``keep``."""
    found: set[str] = set()
    for path, child in module.named_modules():
        if isinstance(child, SEQUENCE_MODULES) and not _under(path, keep | found):
            found.add(path)
    return sorted(found)


def convert_sequence_modules(
    converted: nn.Module,
    paths: list[str],
    spec: FamilySpec,
    keep: set[str],
    options: dict[str, Any],
) -> nn.Module:
    """Replace the modules at ``paths`` of ``converted`` (a copy) by their variational copies
    (a module shared by several paths stays shared) and switch off the transformer fast paths
    outside ``keep``; returns ``converted``, or the new module when a path is "" (the root)."""
    made: dict[int, nn.Module] = {}
    for path in paths:
        child = converted.get_submodule(path)
        if id(child) not in made:
            made[id(child)] = sequence_module(spec, path, child, options)
        if not path:
            return made[id(child)]
        parent, _, attribute = path.rpartition(".")
        setattr(converted.get_submodule(parent), attribute, made[id(child)])
    for path, child in converted.named_modules():
        if _under(path, keep):
            continue
        if type(child) is nn.TransformerEncoderLayer:
            child.__class__ = VariationalTransformerEncoderLayer
        if isinstance(child, nn.TransformerEncoder):
            child.use_nested_tensor = False
    return converted
