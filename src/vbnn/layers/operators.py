"""The operators through which a family's weights act, with the model dimension M kept.

* dense: x (M, N, I), weight (M, I, O), bias (M, O) -> (M, N, O), ``x @ W + b``;
* convolution over d = 1, 2 or 3 spatial dimensions (the rank of ``kernel_size``):
  x (M, N, C, *S), weight (M, O, C, *k), bias (M, O) -> (M, N, O, *S'), with ``stride``,
  ``padding`` and ``dilation`` as ``nn.Conv1d`` / ``nn.Conv2d`` / ``nn.Conv3d``;
* transposed convolution (``transposed=True``), the adjoint of the convolution, as
  ``nn.ConvTranspose1d`` / ``2d`` / ``3d``: x (M, N, C, *S), weight (M, C, O, *k) (torch's
  (in, out, *k) layout), bias (M, O) -> (M, N, O, *S') with, per spatial dimension,
  S' = (S - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.

Both convolutions fold the M models into the channel axis and run one call with ``groups=M``.
Each operator is linear in the weights, so the local reparameterization of the shell applies to
all of them alike: mean = x * mu_W + mu_b, variance = x^2 * var(W) + var(b).
"""

from __future__ import annotations

import copy
import math

import torch
from torch.nn import functional

from vbnn.core.kernels import batched_affine

CONVOLUTIONS = {1: functional.conv1d, 2: functional.conv2d, 3: functional.conv3d}
TRANSPOSED_CONVOLUTIONS = {
    1: functional.conv_transpose1d,
    2: functional.conv_transpose2d,
    3: functional.conv_transpose3d,
}
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
    """Dense (``kernel_size=None``), or a 1-, 2- or 3-D (transposed) convolution, model dim kept.

    Args:
        in_features: I (input channels C for a convolution).
        out_features: O (output channels for a convolution).
        kernel_size: None (dense); an int (a 2-D convolution with a square kernel, as
            ``nn.Conv2d``); or a tuple of 1, 2 or 3 ints, whose length is the number of spatial
            dimensions d.
        stride: an int or a tuple of d ints.
        padding: an int, a tuple of d ints, ``"valid"`` (no padding) or ``"same"`` (stride 1;
            convolutions only, as torch's transposed convolutions take no string).
        dilation: an int or a tuple of d ints.
        transposed: the transposed convolution (``nn.ConvTranspose1d`` / ``2d`` / ``3d``).
        output_padding: of a transposed convolution, an int or d ints, each smaller than its
            dimension's stride or dilation (as torch).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | tuple[int, ...] | None = None,
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, ...] = 1,
        transposed: bool = False,
        output_padding: int | tuple[int, ...] = 0,
    ) -> None:
        if in_features < 1 or out_features < 1:
            raise ValueError(f"layer sizes must be >= 1, got in={in_features}, out={out_features}")
        self.in_features, self.out_features = in_features, out_features
        self.transposed = transposed
        if kernel_size is None:
            defaults = (
                _all(stride, 1) and _all(dilation, 1) and (padding == "valid" or _all(padding, 0))
            )
            if not defaults or transposed or not _all(output_padding, 0):
                raise ValueError(
                    f"stride, padding, dilation, transposed and output_padding apply to "
                    f"convolutions only, got stride={stride!r}, padding={padding!r}, dilation="
                    f"{dilation!r}, transposed={transposed!r}, output_padding={output_padding!r} "
                    f"without kernel_size"
                )
            self.kernel_size, self.rank = None, 0
            self.stride, self.padding, self.dilation, self.output_padding = (), (), (), ()
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
        self.output_padding = spatial_tuple(output_padding, "output_padding", rank)
        if isinstance(padding, str):
            if padding not in PADDING_STRINGS:
                raise ValueError(f"padding must be 'valid', 'same' or ints, got {padding!r}")
            if transposed:
                raise ValueError(
                    f"padding={padding!r}: a transposed convolution takes ints, as "
                    f"nn.ConvTranspose{rank}d"
                )
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
            ("output_padding", self.output_padding, 0),
        ):
            if any(v < low for v in values):
                raise ValueError(f"{name} must be >= {low}, got {values}")
        self.check_output_padding(self.output_padding)

    def check_output_padding(self, output_padding: tuple[int, ...]) -> None:
        """Raise a ValueError naming the values unless each output padding is smaller than its
        dimension's stride or dilation (the only rows a transposed convolution can add);
        convolutions take none."""
        if not self.transposed:
            if any(output_padding):
                raise ValueError(
                    f"output_padding applies to transposed convolutions only, got {output_padding}"
                )
            return
        for pad, stride, dilation in zip(output_padding, self.stride, self.dilation, strict=True):
            if pad >= max(stride, dilation):
                raise ValueError(
                    f"output_padding must be smaller than stride or dilation, got output_padding="
                    f"{output_padding}, stride={self.stride}, dilation={self.dilation}"
                )

    @property
    def is_conv(self) -> bool:
        """Whether the operator is a convolution, transposed or not."""
        return self.kernel_size is not None

    @property
    def kind(self) -> str:
        """ "dense", "conv1d" ... "conv3d" or "conv_transpose1d" ... "conv_transpose3d"."""
        if self.kernel_size is None:
            return "dense"
        return f"conv_transpose{self.rank}d" if self.transposed else f"conv{self.rank}d"

    @property
    def output_axis(self) -> int:
        """The axis of the output units in the weight (model dimension first): 2 for dense
        (M, I, O) and transposed (M, C, O, *k), 1 for a convolution (M, O, C, *k)."""
        return 1 if self.is_conv and not self.transposed else 2

    @property
    def input_axis(self) -> int:
        """The axis of the input units (channels) in the weight (model dimension first)."""
        return 3 - self.output_axis

    def weight_shape(self, num_models: int) -> tuple[int, ...]:
        if self.kernel_size is None:
            return (num_models, self.in_features, self.out_features)
        if self.transposed:
            return (num_models, self.in_features, self.out_features, *self.kernel_size)
        return (num_models, self.out_features, self.in_features, *self.kernel_size)

    def torch_weight_shape(self) -> tuple[int, ...]:
        """The weight of the torch layer: ``nn.Linear`` (O, I), ``nn.ConvNd`` (O, C, *k),
        ``nn.ConvTransposeNd`` (C, O, *k)."""
        if self.kernel_size is None:
            return (self.out_features, self.in_features)
        return self.weight_shape(1)[1:]

    def from_torch(self, weight: torch.Tensor) -> torch.Tensor:
        """A torch layer's weight (``torch_weight_shape``) in this operator's layout, without
        the model dimension."""
        return weight.t() if self.kernel_size is None else weight

    def fan_in(self) -> float:
        """The number of products summed into one output: I dense, C prod(k) for a
        convolution; for a transposed convolution C prod(k / stride), the mean over output
        positions (each input row reaches k outputs, one in every ``stride``)."""
        if self.kernel_size is None:
            return self.in_features
        taps = math.prod(self.kernel_size)
        if self.transposed:
            return self.in_features * taps / math.prod(self.stride)
        return self.in_features * taps

    def output_padding_for(
        self, spatial: tuple[int, ...], output_size: tuple[int, ...] | list[int]
    ) -> tuple[int, ...]:
        """The output padding that makes a transposed convolution of input size ``spatial``
        (d ints) ``output_size`` (d ints, or those of the whole output, as torch takes it).

        Raises:
            ValueError: naming the sizes, when this is no transposed convolution or a size is
                outside [smallest, smallest + max(stride, dilation) - 1].
        """
        if not self.transposed:
            raise ValueError(f"output_size applies to transposed convolutions, not {self.kind}")
        size = tuple(output_size)[-self.rank :] if len(output_size) == self.rank + 2 else None
        size = tuple(output_size) if len(output_size) == self.rank else size
        if size is None:
            raise ValueError(
                f"output_size must have {self.rank} or {self.rank + 2} entries, got "
                f"{tuple(output_size)}"
            )
        smallest = [
            (length - 1) * stride - 2 * pad + dilation * (k - 1) + 1
            for length, stride, pad, dilation, k in zip(
                spatial, self.stride, self.padding, self.dilation, self.kernel_size, strict=True
            )
        ]
        padding = tuple(int(want) - low for want, low in zip(size, smallest, strict=True))
        reach = [max(s, d) for s, d in zip(self.stride, self.dilation, strict=True)]
        if any(not 0 <= pad < top for pad, top in zip(padding, reach, strict=True)):
            largest = [low + top - 1 for low, top in zip(smallest, reach, strict=True)]
            raise ValueError(
                f"output_size {size} is not reachable from an input of spatial size "
                f"{tuple(spatial)}: each size must lie between {tuple(smallest)} and "
                f"{tuple(largest)}"
            )
        return padding

    def with_output_padding(self, output_padding: tuple[int, ...]) -> Operator:
        """A copy of this transposed convolution with another ``output_padding``."""
        self.check_output_padding(output_padding)
        other = copy.copy(self)
        other.output_padding = tuple(output_padding)
        return other

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
                f"input of shape {tuple(x.shape)} does not fit this {self.kind} layer: expected "
                f"{self.expected(num_models)}"
            )

    def apply(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """x @ weight (+ bias) or the grouped (transposed) convolution; see the module docstring
        for shapes."""
        if self.kernel_size is None:
            if bias is None:
                return torch.bmm(x, weight)
            return batched_affine(x, weight, bias)
        models, rows, channels = x.shape[:3]
        folded = x.transpose(0, 1).reshape(rows, models * channels, *x.shape[3:])
        flat_bias = None if bias is None else bias.reshape(-1)
        if self.rank == 2:
            # channels-last: oneDNN's convolution and, above all, its backward run faster in this
            # layout on CPU for LeNet-5's shapes and the transposed convolutions of a small
            # decoder (measured: benchmarks/README.md, variance networks; converted model step)
            folded = folded.contiguous(memory_format=torch.channels_last)
        if self.transposed:
            # (M, C, O, *k) -> (M C, O, *k): torch's grouped layout (in, out / groups, *k)
            kernel = weight.reshape(models * channels, self.out_features, *self.kernel_size)
            out = TRANSPOSED_CONVOLUTIONS[self.rank](
                folded,
                kernel,
                flat_bias,
                self.stride,
                self.padding,
                self.output_padding,
                models,
                self.dilation,
            )
        else:
            kernel = weight.reshape(models * self.out_features, channels, *self.kernel_size)
            out = CONVOLUTIONS[self.rank](
                folded, kernel, flat_bias, self.stride, self.padding, self.dilation, groups=models
            )
        return out.reshape(rows, models, self.out_features, *out.shape[2:]).transpose(0, 1)
