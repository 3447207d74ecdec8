"""The two operators through which a family's weights act, with the model dimension M kept.

* dense: x (M, N, I), weight (M, I, O), bias (M, O) -> (M, N, O), ``x @ W + b``;
* conv2d: x (M, N, C, H, W), weight (M, O, C, kh, kw), bias (M, O) -> (M, N, O, H', W'), with
  ``stride``, ``padding`` and ``dilation`` as ``nn.Conv2d``; the M models are folded into the
  channel axis and convolved with ``groups=M``.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional

from vbnn.core.kernels import batched_affine


def _pair(value: int | tuple[int, int], name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return pair  # type: ignore[return-value]


class Operator:
    """Dense (``kernel_size=None``) or 2-D convolution, with the model dimension kept."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | tuple[int, int] | None = None,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
    ) -> None:
        if in_features < 1 or out_features < 1:
            raise ValueError(f"layer sizes must be >= 1, got in={in_features}, out={out_features}")
        self.in_features, self.out_features = in_features, out_features
        self.kernel_size = None if kernel_size is None else _pair(kernel_size, "kernel_size")
        self.stride, self.padding = _pair(stride, "stride"), _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        if self.kernel_size is not None and min(self.kernel_size) < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        if min(self.stride) < 1 or min(self.dilation) < 1 or min(self.padding) < 0:
            raise ValueError(
                f"stride and dilation must be >= 1 and padding >= 0, got stride={stride}, "
                f"padding={padding}, dilation={dilation}"
            )
        if self.kernel_size is None and (self.stride, self.padding, self.dilation) != (
            (1, 1),
            (0, 0),
            (1, 1),
        ):
            raise ValueError("stride, padding and dilation apply to convolutions only")

    @property
    def is_conv(self) -> bool:
        return self.kernel_size is not None

    def weight_shape(self, num_models: int) -> tuple[int, ...]:
        if self.kernel_size is None:
            return (num_models, self.in_features, self.out_features)
        return (num_models, self.out_features, self.in_features, *self.kernel_size)

    def fan_in(self) -> int:
        return self.in_features * math.prod(self.kernel_size or (1,))

    def expected(self, num_models: int | None) -> str:
        models = "" if num_models is None else f"M={num_models}, "
        if self.kernel_size is None:
            return f"({models}N, {self.in_features})"
        return f"({models}N, {self.in_features}, H, W)"

    def check(self, x: torch.Tensor, num_models: int | None) -> None:
        """Raise a ValueError naming the shapes unless ``x`` fits (``num_models`` None: single)."""
        rank = (2 if self.kernel_size is None else 4) + (num_models is not None)
        channel = 1 if num_models is None else 2
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
        models, rows, channels, height, width = x.shape
        folded = x.transpose(0, 1).reshape(rows, models * channels, height, width)
        # channels-last: oneDNN's convolution and, above all, its backward run 1.3-3x faster in
        # this layout on CPU for LeNet-5's shapes (benchmarks/README.md, variance networks)
        folded = folded.contiguous(memory_format=torch.channels_last)
        kernel = weight.reshape(models * self.out_features, channels, *weight.shape[-2:])
        flat_bias = None if bias is None else bias.reshape(-1)
        out = functional.conv2d(
            folded, kernel, flat_bias, self.stride, self.padding, self.dilation, groups=models
        )
        return out.reshape(rows, models, self.out_features, *out.shape[-2:]).transpose(0, 1)
