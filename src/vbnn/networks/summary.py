"""Per-layer summaries of a model: its layers, their families and sizes; their mean log alpha.

``summary(model)`` lists, in ``named_modules`` order, each variational layer (with all its
parameters) and each other module holding parameters of its own, with why it is deterministic:
"by design" (a normalisation layer, whose scale and shift stay point estimates), "kept" (under a
``keep`` path of ``vbnn.convert``), "not convertible" (left by ``vbnn.convert``, which warned),
"not converted" (a model that did not come from ``vbnn.convert``) or "frozen" (none of its
parameters requires a gradient: the pretrained layers of a model with adapters, ``vbnn.LoRA``).
Two total lines follow: the variational layers' parameters and their memory, then every
parameter. The total counts every parameter once (a shared parameter too), so it equals
``sum(p.numel() for p in model.parameters())``; memory is ``numel * element_size`` bytes.

``mean_log_alpha(model)`` follows the family layers that have a log alpha (variational dropout,
additive) during training: the mean of each one's log alpha (Neklyudov et al. 2019 Fig. 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

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
KEPT_ATTRIBUTE = "vbnn_kept"  # the keep paths ``vbnn.convert`` records on its copy
BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


class SummaryRow(NamedTuple):
    """One line of ``summary``: a layer, or a total ("variational", "total").

    Attributes:
        path: the module's path (a bare layer: its type).
        type: the module's class name ("" on the total lines).
        family: the registry name of a variational layer, else "deterministic" ("" on totals).
        parameters: its parameters not counted on an earlier line.
        bytes: their memory, ``numel * element_size``.
        reason: why a deterministic module is so ("frozen", "by design", "kept", "not
            convertible", "not converted"); "" for a variational layer and the totals.
    """

    path: str
    type: str
    family: str
    parameters: int
    bytes: int
    reason: str


def under(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or inside one of them; the root path "" covers the
    root module alone (its own parameters), not the whole model."""
    return any(path == root or (root and path.startswith(f"{root}.")) for root in roots)


def human_bytes(count: int) -> str:
    """``count`` bytes in binary units: "512 B", "1.5 KiB", "3.0 MiB"."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(BYTE_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {BYTE_UNITS[unit]}"


def _kept_roots(model: nn.Module) -> tuple[str, ...] | None:
    """The ``keep`` paths recorded by ``vbnn.convert`` anywhere in ``model`` (a converted model
    wrapped by ``torch.compile`` or ``DistributedDataParallel`` too), as paths of ``model``;
    None when no module of ``model`` came from ``vbnn.convert``."""
    roots: list[str] | None = None
    for prefix, module in model.named_modules():
        kept = getattr(module, KEPT_ATTRIBUTE, None)
        if kept is not None:
            roots = (roots or []) + [".".join(p for p in (prefix, path) if p) for path in kept]
    return None if roots is None else tuple(roots)


def _reason(path: str, module: nn.Module, kept: tuple[str, ...] | None) -> str:
    if not any(p.requires_grad for p in module.parameters(recurse=False)):
        return "frozen"
    if isinstance(module, NORMALISATION):
        return "by design"
    if kept is None:
        return "not converted"
    return "kept" if under(path, kept) else "not convertible"


def summary_rows(model: nn.Module) -> list[SummaryRow]:
    """One ``SummaryRow`` per layer holding parameters, then the "variational" and "total" rows.

    The family is the registry name of a variational layer, else "deterministic" with its reason
    (module docstring); the path of a bare layer is its type.
    """
    rows, seen = [], set()
    inside: tuple[str, ...] = ()  # paths of variational layers already listed
    kept = _kept_roots(model)
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
            reason = "" if variational else _reason(path, module, kept)
            count = sum(p.numel() for p in fresh)
            size = sum(p.numel() * p.element_size() for p in fresh)
            name = path or type(module).__name__
            rows.append(SummaryRow(name, type(module).__name__, family, count, size, reason))
    variational_rows = [row for row in rows if row.family != "deterministic"]
    totals = []
    for name, chosen in (("variational", variational_rows), ("total", rows)):
        count, size = sum(r.parameters for r in chosen), sum(r.bytes for r in chosen)
        totals.append(SummaryRow(name, "", "", count, size, ""))
    return rows + totals


def summary(model: nn.Module) -> str:
    """A table of ``model``'s layers: path, type, family (or "deterministic"), parameters, their
    memory and why a deterministic one is so, then the variational and overall totals.

    Args:
        model: any ``nn.Module``, converted (``vbnn.convert``) or not.

    Returns:
        The table as text, one layer a line and two total lines, e.g. for
        ``vbnn.convert(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)), "mf")``::

            layer        type         family         parameters  memory  reason
            0            MeanField    mf                     32   128 B
            1            BatchNorm1d  deterministic           8    32 B  by design
            variational                                      32   128 B
            total                                            40   160 B
    """
    header = ("layer", "type", "family", "parameters", "memory", "reason")
    rows = [header] + [
        (row.path, row.type, row.family, str(row.parameters), human_bytes(row.bytes), row.reason)
        for row in summary_rows(model)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        f"{p:<{widths[0]}}  {t:<{widths[1]}}  {f:<{widths[2]}}  {n:>{widths[3]}}  "
        f"{b:>{widths[4]}}  {r}"
        for p, t, f, n, b, r in rows
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
