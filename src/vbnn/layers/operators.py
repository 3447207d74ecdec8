"""The two operators through which a family's weights act, with the model dimension M kept.

* dense: x (M, N, I), weight (M, I, O), bias (M, O) -> (M, N, O), ``x @ W + b``;
* convolution over d = 1, 2 or 3 spatial dimensions (the rank of ``kernel_size``):
  x (M, N, C, *S), weight (M, O, C, *k), bias (M, O) -> (M, N, O, *S'), with ``stride``,
  ``padding`` and ``dilation`` as ``nn.Conv1d`` / ``nn.Conv2d`` / ``nn.Conv3d``; the M models are
  folded into the channel axis and convolved with ``groups=M``.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional

from vbnn.core.kernels import batched_affine

CONVOLUTIONS = {1: functional.conv1d, 2: functional.conv2d, 3: functional.conv3d}
SPATIAL_NAMES = {1: "L", 2: "H, W", 3: "D, H, W"}
PADDING_STRINGS = ("valid", "same")


def spatial_tuple(value: int | tuple[int, ...], name: str, rank: int) -> tuple[int, ...]:
    """``value`` as a tuple of ``rank`` ints (an int is repeated, as torch's convolutions do).

    Raises:
        ValueError: naming ``name``, when ``value`` is neither an int nor ``rank`` ints.
    """
    values = (value,) * rank if isinstance(value, int) else tuple(value)
    if len(values) != rank or not all(isinstance(v, int) for v in values):
        raise ValueError(
            f"{name} must be an int or a tuple of {rank} ints for a {rank}-D convolution, "
            f"got {value!r}"
        )
    return values


def _all(value: int | tuple[int, ...] | str, target: int) -> bool:
    values = (value,) if isinstance(value, (int, str)) else tuple(value)
    return all(v == target for v in values)


class Operator:
    """Dense (``kernel_size=None``) or a 1-, 2- or 3-D convolution, with the model dim kept.

    Args:
        in_features: I (input channels C for a convolution).
        out_features: O (output channels for a convolution).
        kernel_size: None (dense); an int (a 2-D convolution with a square kernel, as
            ``nn.Conv2d``); or a tuple of 1, 2 or 3 ints, whose length is the number of spatial
            dimensions d.
        stride: an int or a tuple of d ints.
        padding: an int, a tuple of d ints, ``"valid"`` (no padding) or ``"same"`` (stride 1).
        dilation: an int or a tuple of d ints.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | tuple[int, ...] | None = None,
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, ...] = 1,
    ) -> None:
        if in_features < 1 or out_features < 1:
            raise ValueError(f"layer sizes must be >= 1, got in={in_features}, out={out_features}")
        self.in_features, self.out_features = in_features, out_features
        if kernel_size is None:
            defaults = (
                _all(stride, 1) and _all(dilation, 1) and (padding == "valid" or _all(padding, 0))
            )
            if not defaults:
                raise ValueError(
                    f"stride, padding and dilation apply to convolutions only, got stride="
                    f"{stride!r}, padding={padding!r}, dilation={dilation!r} without kernel_size"
                )
            self.kernel_size, self.rank = None, 0
            self.stride, self.padding, self.dilation = (), (), ()
            return
        rank = 2 if isinstance(kernel_size, int) else len(tuple(kernel_size))
        if rank not in CONVOLUTIONS:
            raise ValueError(
                f"kernel_size must be an int or a tuple of 1, 2 or 3 ints, got {kernel_size!r}"
            )
        self.rank = rank
        self.kernel_size = spatial_tuple(kernel_size, "kernel_size", rank)
        self.stride = spatial_tuple(stride, "stride", rank)
        self.dilation = spatial_tuple(dilation, "dilation", rank)
        if isinstance(padding, str):
            if padding not in PADDING_STRINGS:
                raise ValueError(f"padding must be 'valid', 'same' or ints, got {padding!r}")
            if padding == "same" and self.stride != (1,) * rank:
                raise ValueError(f"padding='same' needs stride 1, got stride={stride!r}")
            self.padding: tuple[int, ...] | str = (0,) * rank if padding == "valid" else padding
        else:
            self.padding = spatial_tuple(padding, "padding", rank)
        for name, values, low in (
            ("kernel_size", self.kernel_size, 1),
            ("stride", self.stride, 1),
            ("dilation", self.dilation, 1),
            ("padding", () if isinstance(self.padding, str) else self.padding, 0),
        ):
            if any(v < low for v in values):
                raise ValueError(f"{name} must be >= {low}, got {values}")

    @property
    def is_conv(self) -> bool:
        return self.kernel_size is not None

    @property
    def kind(self) -> str:
        """ "dense", "conv1d", "conv2d" or "conv3d"."""
        return "dense" if self.kernel_size is None else f"conv{self.rank}d"

    def weight_shape(self, num_models: int) -> tuple[int, ...]:
        if self.kernel_size is None:
            return (num_models, self.in_features, self.out_features)
        return (num_models, self.out_features, self.in_features, *self.kernel_size)

    def fan_in(self) -> int:
        return self.in_features * math.prod(self.kernel_size or (1,))

    def expected(self, num_models: int | None) -> str:
        models = "" if num_models is None else f"M={num_models}, "
        if self.kernel_size is None:
            return f"({models}N, {self.in_features})" if num_models else f"(*, {self.in_features})"
        return f"({models}N, {self.in_features}, {SPATIAL_NAMES[self.rank]})"

    def check(self, x: torch.Tensor, num_models: int | None) -> None:
        """Raise a ValueError naming the shapes unless ``x`` fits (``num_models`` None: single; a
        single dense layer takes (*, I), as ``nn.Linear``)."""
        rank = 2 + self.rank + (num_models is not None)
        channel = 1 if num_models is None else 2
        if num_models is None and self.kernel_size is None:
            rank, channel = max(x.dim(), 1), -1
        ok = x.dim() == rank and x.shape[channel] == self.in_features
        if num_models is not None:
            ok = ok and x.shape[0] == num_models
        if not ok:
            raise ValueError(
                f"input of shape {tuple(x.shape)} does not fit this layer: expected "
                f"{self.expected(num_models)}"
            )

    def apply(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """x @ weight (+ bias) or the grouped convolution; see the module docstring for shapes."""
        if self.kernel_size is None:
            if bias is None:
                return torch.bmm(x, weight)
            return batched_affine(x, weight, bias)
        models, rows, channels = x.shape[:3]
        folded = x.transpose(0, 1).reshape(rows, models * channels, *x.shape[3:])
        if self.rank == 2:
            # channels-last: oneDNN's convolution and, above all, its backward run faster in this
            # layout on CPU for LeNet-5's shapes (measured: benchmarks/README.md, variance networks)
            folded = folded.contiguous(memory_format=torch.channels_last)
        kernel = weight.reshape(models * self.out_features, channels, *self.kernel_size)
        flat_bias = None if bias is None else bias.reshape(-1)
        out = CONVOLUTIONS[self.rank](
            folded, kernel, flat_bias, self.stride, self.padding, self.dilation, groups=models
        )
        return out.reshape(rows, models, self.out_features, *out.shape[2:]).transpose(0, 1)
