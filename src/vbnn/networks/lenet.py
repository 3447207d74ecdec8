"""LeNet-5-Caffe whose four layers each come from any variance-network family.

Architecture (Neklyudov et al. 2019 section 6.1, Caffe's LeNet): conv 20@5x5 -> max-pool 2
-> conv 50@5x5 -> max-pool 2 -> dense 800 -> 500 -> dense 500 -> 10, with the chosen non-linearity
after conv1, conv2 and dense1 (before pooling); optionally BatchNorm on dense1's output before
its non-linearity (the authors' public code, ``da-molchanov/variance-networks``; the papers'
text has none). One network (``generators`` None): images
(N, 1, 28, 28) -> logits (N, 10), like any ``nn.Module``. A stack of M (``generators`` a
``ModelGenerators``): images (M, N, 1, 28, 28) -> logits (M, N, 10); convolutions use groups=M.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.registry import FAMILIES, family
from vbnn.layers.shell import VariationalLayer


class NetworkActivation(str, Enum):
    RELU = "relu"
    SOFTPLUS = "softplus"
    TANH = "tanh"
    ABS = "abs"  # Neklyudov et al. 2018 appendix D: |.| after a zero-mean layer


ACTIVATIONS: dict[NetworkActivation, Callable[[torch.Tensor], torch.Tensor]] = {
    NetworkActivation.RELU: torch.relu,
    NetworkActivation.SOFTPLUS: functional.softplus,
    NetworkActivation.TANH: torch.tanh,
    NetworkActivation.ABS: torch.abs,
}
# the names of the four layers, in order, for per-layer summaries (``summary.mean_log_alpha``)
LAYER_NAMES = ("conv1", "conv2", "dense1", "dense2")


@dataclass(frozen=True)
class LeNetConfig:
    """Families of (conv1, conv2, dense1, dense2) (``vbnn.layers.FAMILIES`` names), the
    non-linearity, biases, the marginal posterior std at initialisation of every layer (``gd``
    keeps it fixed; passed as the family's ``init_std`` or ``std``; None: defaults; a family with
    no std refuses it), the initial log alpha of
    every layer whose family takes one (variational dropout; None: the family's default), and
    BatchNorm after dense1."""

    families: tuple[str, str, str, str] = ("vd-layer",) * 4
    activation: NetworkActivation = NetworkActivation.RELU
    bias: bool = True
    posterior_std: float | None = None
    log_alpha_init: float | None = None
    batch_norm: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "families", tuple(self.families))
        object.__setattr__(self, "activation", NetworkActivation(self.activation))
        if len(self.families) != 4:
            raise ValueError(f"LeNetConfig: need 4 families, got {self.families!r}")
        for name in self.families:
            if name not in FAMILIES:
                raise ValueError(
                    f"LeNetConfig: unknown family {name!r}; choose from {list(FAMILIES)}"
                )


def make_layer(
    name: str,
    sizes: tuple[int, int, int | None],
    generators,
    config: LeNetConfig,
    dtype,
    training_mode: ForwardMode | str | None = None,
) -> VariationalLayer:
    """Layer ``name`` of (in, out, kernel size) ``sizes`` with ``config``'s options, training with
    ``training_mode`` (None: the layer's default)."""
    spec = family(name)
    in_features, out_features, kernel_size = sizes
    options = {"dtype": dtype, "kernel_size": kernel_size, "bias": config.bias}
    if training_mode is not None:
        options["training_mode"] = training_mode
    if config.posterior_std is not None:
        options[spec.std_option()] = config.posterior_std
    if config.log_alpha_init is not None and "log_alpha" in spec.accepted_options():
        options["log_alpha"] = config.log_alpha_init
    return spec.build(in_features, out_features, generators, **options)


class LeNet5(nn.Module):
    """LeNet-5-Caffe (see module docstring); ``training_mode`` sets every layer's training
    estimator (None: the layers' defaults, ``VariationalLayer.training_mode``)."""

    takes_mode = True  # forward(x, mode, noise), like the family layers

    def __init__(
        self,
        config: LeNetConfig | None = None,
        generators: ModelGenerators | None = None,
        dtype: torch.dtype = torch.float32,
        training_mode: ForwardMode | str | None = None,
    ) -> None:
        super().__init__()
        config = LeNetConfig() if config is None else config
        self.config = config
        self.activation = ACTIVATIONS[config.activation]
        sizes = [(1, 20, 5), (20, 50, 5), (800, 500, None), (500, 10, None)]
        self.layers = nn.ModuleList(
            make_layer(name, size, generators, config, dtype, training_mode)
            for name, size in zip(config.families, sizes, strict=True)
        )
        models = len(generators) if isinstance(generators, ModelGenerators) else 1
        # one BatchNorm feature per (model, unit): the models of a stack stay independent
        self.norm = nn.BatchNorm1d(models * 500, dtype=dtype) if config.batch_norm else None

    def normalise(self, output: torch.Tensor) -> torch.Tensor:
        """BatchNorm of dense1's output (N, 500) or (M, N, 500), per model and unit."""
        if output.dim() == 2:
            return self.norm(output)
        models, rows, features = output.shape
        flat = output.transpose(0, 1).reshape(rows, models * features)
        return self.norm(flat).reshape(rows, models, features).transpose(0, 1)

    def after(self, index: int, output: torch.Tensor) -> torch.Tensor:
        """What follows layer ``index``: (BatchNorm,) activation, then pooling (conv) or
        flattening."""
        if index == len(self.layers) - 1:
            return output
        if index == 2 and self.norm is not None:
            output = self.normalise(output)
        hidden = self.activation(output)
        if index < 2:  # (..., C, H, W): pool the trailing image, keep any leading dimensions
            pooled = functional.max_pool2d(hidden.flatten(0, -4), 2)
            hidden = pooled.reshape(*hidden.shape[:-3], *pooled.shape[1:])
            if index == 1:
                hidden = hidden.flatten(-3)
        return hidden

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode | str | None = None,
        noise: NoiseSource | None = None,
    ) -> torch.Tensor:
        """Images (N, 1, 28, 28) -> logits (N, 10); a stack: (M, N, 1, 28, 28) -> (M, N, 10)."""
        return self.forward_from(0, x, mode, noise)

    def forward_from(
        self,
        index: int,
        x: torch.Tensor,
        mode: ForwardMode | str | None = None,
        noise: NoiseSource | None = None,
    ) -> torch.Tensor:
        """Run layers ``index`` .. end on ``x``, the input of layer ``index``."""
        for position in range(index, len(self.layers)):
            x = self.after(position, self.layers[position](x, mode, noise))
        return x

    def input_of(
        self,
        index: int,
        x: torch.Tensor,
        mode: ForwardMode = ForwardMode.MEAN,
        noise: NoiseSource | None = None,
    ) -> torch.Tensor:
        """The input of layer ``index`` for images ``x``."""
        for position in range(index):
            x = self.after(position, self.layers[position](x, mode, noise))
        return x
