"""Per-layer summaries of a model: its layers, their families and sizes; their mean log alpha.

``summary(model)`` lists, in ``named_modules`` order, each variational layer (with all its
parameters) and each other module holding parameters of its own, then the total. The total counts
every parameter once (a shared parameter too), so it equals ``sum(p.numel() for p in
model.parameters())``.

``mean_log_alpha(model)`` follows the family layers that have a log alpha (variational dropout,
additive) during training: the mean of each one's log alpha (Neklyudov et al. 2019 Fig. 3).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from vbnn.layers.modes import variational_layers
from vbnn.layers.shell import VariationalLayer

# Normalisation layers stay deterministic by design: their scale and shift are trained as point
# estimates and ``vbnn.convert`` neither converts nor warns about them.
NORMALISATION = (
    nn.modules.batchnorm._NormBase,  # BatchNorm1d/2d/3d, SyncBatchNorm, InstanceNorm1d/2d/3d
    nn.LayerNorm,
    nn.GroupNorm,
    nn.RMSNorm,
)


def summary_rows(model: nn.Module) -> list[tuple[str, str, str, int]]:
    """(path, type, family, parameters) of every layer holding parameters, then the total row.

    The family is the registry name of a variational layer, else "deterministic"; the path of a
    bare layer is its type.
    """
    rows, seen = [], set()
    inside: tuple[str, ...] = ()  # paths of variational layers already listed
    for path, module in model.named_modules():
        if any(path.startswith(f"{outer}.") for outer in inside):
            continue
        variational = isinstance(module, VariationalLayer)
        parameters = module.parameters(recurse=variational)
        fresh = [p for p in parameters if id(p) not in seen]
        seen.update(id(p) for p in fresh)
        if variational:
            inside += (path,)
        if fresh or variational:
            family = module.family_name if variational else "deterministic"
            count = sum(p.numel() for p in fresh)
            rows.append((path or type(module).__name__, type(module).__name__, family, count))
    total = sum(row[3] for row in rows)
    rows.append(("total", "", "", total))
    return rows


def summary(model: nn.Module) -> str:
    """A table of ``model``'s layers: path, type, family (or "deterministic"), parameters.

    Args:
        model: any ``nn.Module``, converted (``vbnn.convert``) or not.

    Returns:
        The table as text, one layer a line and a total line, e.g. for
        ``vbnn.convert(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)), "mf")``::

            layer  type         family         parameters
            0      MeanField    mf                     32
            1      BatchNorm1d  deterministic           8
            total                                      40
    """
    header = ("layer", "type", "family", "parameters")
    rows = [header] + [(p, t, f, str(n)) for p, t, f, n in summary_rows(model)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        f"{p:<{widths[0]}}  {t:<{widths[1]}}  {f:<{widths[2]}}  {n:>{widths[3]}}"
        for p, t, f, n in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


def mean_log_alpha(model: nn.Module, names: Sequence[str] | None = None) -> dict[str, float]:
    """Mean over its weights of the clipped log alpha = log(sigma^2 / mu^2) of model 0, for every
    family layer of ``model`` that has one (variational dropout, additive), by layer name.

    Args:
        model: any module holding family layers, one network or a stack.
        names: one name per family layer of ``model``, in ``variational_layers`` order
            (``LeNet5``: ``networks.lenet.LAYER_NAMES``); None: their paths in
            ``model.named_modules()``.

    Raises:
        ValueError: ``names`` does not name every family layer.
    """
    layers = variational_layers(model)
    if names is None:
        names = [
            path or type(module).__name__
            for path, module in model.named_modules()
            if isinstance(module, VariationalLayer)
        ]
    if len(names) != len(layers):
        raise ValueError(
            f"mean_log_alpha: {len(names)} names {list(names)} for {len(layers)} family layers"
        )
    return {
        name: float(layer.mean_log_alpha().flatten()[0])
        for name, layer in zip(names, layers, strict=True)
        if hasattr(layer, "mean_log_alpha")
    }
