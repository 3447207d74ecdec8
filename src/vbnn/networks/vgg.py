"""The VGG-like network of the variance-network papers for CIFAR-10/100 (one network, no stack).

Architecture (Neklyudov et al. 2019 section 6.1, "VGG-like (Zagoruyko 2015)"; layer list
and dropout rates as the authors' public code, which the paper does not print): thirteen 3x3
convolutions with padding 1, each followed by BatchNorm and ReLU,

    64 64 M 128 128 M 256 256 256 M 512 512 512 M 512 512 512 M

(M: 2x2 max-pool), then dense 512 -> 512 with BatchNorm and ReLU, and dense 512 -> classes. The
variance VGG of Neklyudov et al. 2019 Table 2 takes the last three convolutions and the first dense
layer from a stochastic family (layer-wise variational dropout, ``vd-layer``: "the first
fully-connected layer and the last three convolutional layers are variational dropout layers");
every other layer is deterministic (``point``). Binary dropout on the input of the deterministic
layers (rates 0.3 before conv2, 0.4 before conv4, 6, 7, 9, 10, 0.5 before both dense layers) is the
"Dropout" network when every layer is deterministic; the variance network keeps it on its
deterministic layers, as the authors' code (none before its stochastic dense1). ``width`` scales
every channel count (1: the paper's network; a small value for tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import NoiseSource
from vbnn.layers.binary_dropout import BinaryDropout
from vbnn.layers.point import Point
from vbnn.layers.registry import family

POOL = "M"
LAYOUT: tuple[int | str, ...] = (
    64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL, 512, 512, 512, POOL, 512, 512, 512, POOL,
)  # fmt: skip
# dropout rate on the input of conv k (1-based) in the authors' code
INPUT_DROPOUT = {2: 0.3, 4: 0.4, 6: 0.4, 7: 0.4, 9: 0.4, 10: 0.4}
DENSE_DROPOUT = 0.5
STOCHASTIC_CONVS = (11, 12, 13)  # with dense1, the layers taken from ``VGGConfig.family``


@dataclass(frozen=True)
class VGGConfig:
    """Classes (10 or 100), the family of conv11-13 and dense1 (a ``vbnn.layers.FAMILIES``
    name; "point" for the plain or dropout network), binary dropout on or off, the
    channel scale ``width`` and the square image side (32 for CIFAR)."""

    classes: int = 10
    family: str = "vd-layer"
    dropout: bool = True
    width: float = 1.0
    image_size: int = 32

    def __post_init__(self) -> None:
        family(self.family)  # a ValueError lists the choices
        if self.classes < 2 or self.width <= 0:
            raise ValueError(f"VGGConfig: classes {self.classes} must be >= 2, width > 0")
        if self.image_size % 32:
            raise ValueError(f"VGGConfig: image_size {self.image_size} must be a multiple of 32")


class VGGLike(nn.Module):
    """The VGG-like network (see the module docstring): images (N, 3, S, S) -> logits (N, C).

    Args:
        config: the classes, family, dropout and width (None: ``VGGConfig()``).
        generators: the ``torch.Generator`` that initialises every layer, passed on as the
            layers' ``generators`` (None: torch's global RNG).
        dtype: the parameters' dtype.
    """

    takes_mode = True  # forward(x, mode, noise), like the family layers

    def __init__(
        self,
        config: VGGConfig | None = None,
        generators: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config = config = VGGConfig() if config is None else config

        def layer(name: str | None, in_features: int, out_features: int, rate: float,
                  kernel_size: int | None = None) -> nn.Module:  # fmt: skip
            """A layer of family ``name`` (None or "point": deterministic, with binary dropout
            ``rate`` on its input when > 0), a convolution with padding 1 when ``kernel_size``;
            the network's ``generators`` and ``dtype``."""
            shape = {"kernel_size": kernel_size, "padding": 1} if kernel_size else {}
            if (name is None or name == "point") and rate > 0:
                return BinaryDropout(
                    in_features, out_features, generators, dtype=dtype, rate=rate, **shape
                )
            if name is None or name == "point":
                return Point(in_features, out_features, generators, dtype=dtype, **shape)
            bias = kernel_size is None  # BatchNorm follows every convolution: no conv bias
            return family(name).build(
                in_features, out_features, generators, dtype=dtype, bias=bias, **shape
            )

        self.convs, self.norms = nn.ModuleList(), nn.ModuleList()
        channels, index = 3, 0
        for item in LAYOUT:
            if item == POOL:
                continue
            index += 1
            out = max(1, round(int(item) * config.width))
            name = config.family if index in STOCHASTIC_CONVS else None
            rate = INPUT_DROPOUT.get(index, 0.0) if config.dropout else 0.0
            self.convs.append(layer(name, channels, out, rate, kernel_size=3))
            self.norms.append(nn.BatchNorm2d(out, dtype=dtype))
            channels = out
        side = config.image_size // 32
        hidden = max(1, round(512 * config.width))
        dense_rate = DENSE_DROPOUT if config.dropout else 0.0
        stochastic_dense = config.family != "point"
        self.dense1 = layer(config.family, channels * side * side, hidden,
                            0.0 if stochastic_dense else dense_rate)  # fmt: skip
        self.dense_norm = nn.BatchNorm1d(hidden, dtype=dtype)
        self.dense2 = layer(None, hidden, config.classes, dense_rate)

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode | str | None = None,
        noise: NoiseSource | None = None,
    ) -> torch.Tensor:
        """Images (N, 3, S, S) -> logits (N, classes)."""
        size = self.config.image_size
        if x.dim() != 4 or tuple(x.shape[1:]) != (3, size, size):
            raise ValueError(f"VGGLike: input of shape {tuple(x.shape)}, expected (N, 3, {size}, "
                             f"{size})")  # fmt: skip
        index = 0
        for item in LAYOUT:
            if item == POOL:
                x = functional.max_pool2d(x, 2)
                continue
            x = torch.relu(self.norms[index](self.convs[index](x, mode, noise)))
            index += 1
        x = torch.relu(self.dense_norm(self.dense1(x.flatten(1), mode, noise)))
        return self.dense2(x, mode, noise)
