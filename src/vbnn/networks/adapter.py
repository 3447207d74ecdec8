"""Bayesian low-rank adapters: the pretrained weights frozen, the adapter's factors variational.

LoRA (Hu et al. 2022) fine-tunes a dense layer y = x W0^T + b0 by a low-rank update,

    y = x W0^T + b0 + (alpha / r) x A^T B^T,        A: (r, I),  B: (O, r),

with W0 (O, I) and b0 (O,) frozen. ``vbnn.convert(model, family, adapter=LoRA(...))`` gives every
targeted ``nn.Linear`` (and Hugging Face's ``Conv1D``, y = x W0 + b0 with W0 of shape (I, O), as
GPT-2 uses) such an update, wrapped in a ``LowRankAdapter``:

* A is a layer of the family (dense, I -> r, no bias), so the KL, IVON, the forward modes, the
  noise streams and ``vbnn.summary`` treat it as any family layer;
* B is a point layer (r -> O, no bias) at zero: a Gaussian posterior over A, B deterministic, as
  BLoB (Wang et al. 2024); with ``variational="both"`` B is a layer of the family too, at zero
  mean, so that IVON moves every adapter weight, as IVON-LoRA (Cong et al. 2024);
* B = 0 at the start, so the adapted model computes the pretrained function in every mode.

Every other parameter of the converted copy is frozen (``requires_grad=False``), except those of
the modules ``LoRA.trainable`` names (a new classification head): ``vbnn.train`` and any
optimiser built on the parameters that require a gradient leave the pretrained weights bitwise
as they were. ``vbnn.kl`` sums the adapters' KL alone; ``vbnn.summary`` lists the adapters as
variational layers and the pretrained layers as deterministic, "frozen".

The estimator. A trains with one weight draw per minibatch (``training_mode="weights"``, as IVON
samples): the local reparameterization trick would keep x^2, of the input's size (N, I), for the
backward pass of every adapted layer, an activation larger on a transformer than the adapter
itself; ``training_mode="local"`` asks for it (both estimators are unbiased for the expected
log-likelihood; the LRT's draw per example gives the gradient a lower variance).

``adapter_state_dict(model)`` holds the adapter alone (A's and B's tensors and the trainable
modules' parameters, by path); ``load_adapter(model, state)`` puts it back into a model converted
from the same pretrained one with the same ``LoRA``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.layers.point import Point
from vbnn.layers.registry import FamilySpec
from vbnn.layers.shell import VariationalLayer
from vbnn.networks.summary import under

ADAPTER_ATTRIBUTE = "vbnn_adapter"  # the LoRA settings a converted copy records
STACK_OPTIONS = ("generators", "num_models")  # an adapter belongs to one network


class AdapterFactors(str, Enum):
    """Which factors of the update B A are variational."""

    DOWN = "down"  # A alone, B a point estimate (BLoB)
    BOTH = "both"  # A and B (IVON-LoRA)


def _names(value: str | Iterable[str], argument: str) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(name, str) and name for name in names):
        raise TypeError(f"LoRA: {argument} must be non-empty strings, got {value!r}")
    return names


@dataclass(frozen=True)
class LoRA:
    """The adapter ``vbnn.convert(model, family, adapter=LoRA(...))`` adds (module docstring).

    Attributes:
        rank: r, the rank of the update B A.
        alpha: the update is scaled by alpha / r (Hu et al. 2022).
        targets: substrings of module paths (``"c_attn"``, ``"query"``): every ``nn.Linear`` or
            Hugging Face ``Conv1D`` whose path holds one of them gets an adapter; () adapts every
            one of them.
        variational: "down" (A variational, B a point estimate) or "both".
        trainable: substrings of module paths whose parameters stay trainable point estimates
            (a new head); every other pretrained parameter is frozen.
    """

    rank: int = 8
    alpha: float = 8.0
    targets: tuple[str, ...] = ()
    variational: AdapterFactors = AdapterFactors.DOWN
    trainable: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoRA: rank must be an int >= 1, got {self.rank!r}")
        if not self.alpha > 0:
            raise ValueError(f"LoRA: alpha must be > 0, got {self.alpha!r}")
        object.__setattr__(self, "targets", _names(self.targets, "targets"))
        object.__setattr__(self, "trainable", _names(self.trainable, "trainable"))
        object.__setattr__(self, "variational", AdapterFactors(self.variational))

    @property
    def scale(self) -> float:
        """alpha / r."""
        return self.alpha / self.rank


class LowRankAdapter(nn.Module):
    """y = base(x) + scale * up(down(x)): a frozen dense layer plus the update x A^T B^T.

    Args:
        base: the pretrained layer (frozen), ``nn.Linear`` or Hugging Face ``Conv1D``.
        down: A, a family layer I -> r without bias.
        up: B, a point or family layer r -> O without bias.
        scale: alpha / r.
    """

    def __init__(
        self, base: nn.Module, down: VariationalLayer, up: VariationalLayer, scale: float
    ) -> None:
        super().__init__()
        self.base, self.down, self.up, self.scale = base, down, up, scale

    @property
    def rank(self) -> int:
        return self.down.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(*, I) -> (*, O); ``down`` and ``up`` run in the mode and draw from the noise that
        ``vbnn.mode`` and ``vbnn.use_noise`` set (training: a draw; eval: the means)."""
        return self.base(x) + self.scale * self.up(self.down(x))

    def extra_repr(self) -> str:
        return f"rank={self.rank}, scale={self.scale:g}"


def dense_sizes(module: nn.Module) -> tuple[int, int] | None:
    """(I, O) of a layer an adapter can wrap: ``nn.Linear``, or Hugging Face's ``Conv1D`` (found
    by its class, so that transformers is never imported here), whose weight is (I, O); None
    for any other module."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    kind = type(module)
    if kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers"):
        inputs, outputs = module.weight.shape
        return int(inputs), int(outputs)
    return None


def adapter_layer(
    spec: FamilySpec, adapter: LoRA, base: nn.Module, options: Mapping[str, Any]
) -> LowRankAdapter:
    """``base`` (frozen in place) with an adapter of ``spec``'s family: A from the family's
    initialisation, B = 0, on ``base``'s device and dtype."""
    inputs, outputs = dense_sizes(base)
    weight = base.weight
    options = {"training_mode": ForwardMode.WEIGHTS, "dtype": weight.dtype, **options}
    down = spec.build(inputs, adapter.rank, None, bias=False, **options)
    if adapter.variational is AdapterFactors.BOTH:
        if not spec.layer.has_weight_mean:
            raise ValueError(
                f"LoRA(variational='both'): family {spec.name!r} has no weight mean, so B cannot "
                "start at 0; use variational='down'"
            )
        up = spec.build(adapter.rank, outputs, None, bias=False, **options)
    else:
        up = Point(adapter.rank, outputs, None, bias=False, dtype=weight.dtype)
    up.load_means(torch.zeros(outputs, adapter.rank, dtype=weight.dtype))
    base.requires_grad_(False)
    return LowRankAdapter(base, down, up, adapter.scale).to(weight.device)


def _check_request(module: nn.Module, adapter: LoRA, keep: set[str], options: Mapping) -> None:
    if keep:
        raise ValueError(
            f"convert: keep={sorted(keep)} with an adapter; the adapted layers are chosen by "
            "LoRA(targets=...) and every other layer stays frozen"
        )
    stack = sorted(set(options) & set(STACK_OPTIONS))
    if stack:
        raise ValueError(f"convert: an adapter belongs to one network; do not pass {stack}")
    if "draw" in options:
        raise ValueError(
            "convert: draw= is an option of recurrent and attention modules, which "
            "an adapter does not convert"
        )


def _chosen_paths(module: nn.Module, adapter: LoRA) -> set[str]:
    """Paths of the layers to adapt; a target or trainable name that matches nothing is an
    error listing what there is."""
    dense = [name for name, child in module.named_modules() if dense_sizes(child) is not None]
    chosen = {
        name
        for name in dense
        if not adapter.targets or any(target in name for target in adapter.targets)
    }
    unused = [target for target in adapter.targets if not any(target in name for name in dense)]
    if unused or not chosen:
        raise ValueError(
            f"convert: LoRA targets {list(unused or adapter.targets)} match no nn.Linear or "
            f"Conv1D of {type(module).__name__}; its dense layers are {dense}"
        )
    paths = [name for name, _ in module.named_modules() if name]
    unused = [name for name in adapter.trainable if not any(name in path for path in paths)]
    if unused:
        raise ValueError(
            f"convert: LoRA trainable {unused} match no module of {type(module).__name__}"
        )
    return chosen


def add_adapters(
    module: nn.Module,
    spec: FamilySpec,
    adapter: LoRA,
    keep: set[str],
    options: Mapping[str, Any],
) -> nn.Module:
    """A frozen copy of ``module`` with an adapter of ``spec``'s family in every targeted layer
    (``vbnn.convert`` with ``adapter=``; the module docstring says what else holds).

    Raises:
        ValueError: a target or trainable name matching no layer (the dense layers listed),
            ``keep``, a stack option, or ``variational="both"`` with a family without means.
    """
    _check_request(module, adapter, keep, options)
    if dense_sizes(module) is not None:  # a bare layer
        return adapter_layer(spec, adapter, copy.deepcopy(module), options)
    chosen = _chosen_paths(module, adapter)
    converted = copy.deepcopy(module).requires_grad_(False)
    made: dict[int, LowRankAdapter] = {}  # one adapter per pretrained layer: ties stay tied
    for parent_name, parent in list(converted.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent._modules.items()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if name in chosen and dense_sizes(child) is not None:
                if id(child) not in made:
                    made[id(child)] = adapter_layer(spec, adapter, child, options)
                setattr(parent, child_name, made[id(child)])
    for _, child in _trainable_modules(converted, adapter.trainable):
        child.requires_grad_(True)
    setattr(converted, ADAPTER_ATTRIBUTE, adapter)
    return converted


def _trainable_modules(model: nn.Module, names: tuple[str, ...]) -> list[tuple[str, nn.Module]]:
    """Modules of ``model`` whose path holds one of ``names``, outside the adapters."""
    adapters = [path for path, child in model.named_modules() if isinstance(child, LowRankAdapter)]
    return [
        (path, child)
        for path, child in model.named_modules()
        if path and any(name in path for name in names) and not under(path, adapters)
    ]


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter of ``model`` alone, by path as in ``model.state_dict()``: the tensors of
    every adapter's A and B, and the parameters of the modules ``LoRA.trainable`` named (the
    pretrained weights are left out: they are the pretrained model's).

    Raises:
        ValueError: ``model`` holds no adapter.
    """
    state: dict[str, torch.Tensor] = {}
    for prefix, root in model.named_modules():
        lead = f"{prefix}." if prefix else ""
        adapter = getattr(root, ADAPTER_ATTRIBUTE, None)
        if adapter is not None:
            for path, child in _trainable_modules(root, adapter.trainable):
                state.update(child.state_dict(prefix=f"{lead}{path}."))
        if isinstance(root, LowRankAdapter):
            state.update(root.down.state_dict(prefix=f"{lead}down."))
            state.update(root.up.state_dict(prefix=f"{lead}up."))
    if not state:
        raise ValueError(
            f"adapter_state_dict: {type(model).__name__} holds no adapter (convert it with "
            "vbnn.convert(model, family, adapter=vbnn.LoRA(...)))"
        )
    return state


@torch.no_grad()
def load_adapter(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` (from ``adapter_state_dict``) into ``model``'s adapter, in place.

    Raises:
        ValueError: a key missing from ``state`` or not of ``model``'s adapter, or a tensor of
            another shape (each named): ``model`` was not converted with the same ``LoRA``.
    """
    target = adapter_state_dict(model)
    missing, unexpected = sorted(set(target) - set(state)), sorted(set(state) - set(target))
    if missing or unexpected:
        raise ValueError(
            f"load_adapter: missing {missing}, unexpected {unexpected}; convert the model with "
            "the LoRA settings the adapter was trained with"
        )
    for key, tensor in target.items():
        if tensor.shape != state[key].shape:
            raise ValueError(
                f"load_adapter: {key} is {tuple(state[key].shape)} in the state, "
                f"{tuple(tensor.shape)} in the model"
            )
        tensor.copy_(state[key])
