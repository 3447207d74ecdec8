"""Fused forward/backward kernels for the hot path of the dense families.

Each kernel is an ``torch.autograd.Function`` whose backward is written out by hand, so that a
training step runs a handful of in-place passes over the (M, N, O) activations instead of the
dozen temporaries autograd keeps for the composite expression. Each is tested against the
composite (gradcheck in float64, tests/test_kernels.py). benchmarks/README.md has the timings.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.autograd.function import once_differentiable

INVERSE_LN2 = 1.0 / math.log(2.0)
TWO_OVER_LN2 = 2.0 / math.log(2.0)


# Values a model (the tensor's size over its leading model dimension) from which ``exponential``
# and ``variance_from_log_std`` take exp2; below, exp: a few microseconds a call, exp's exact
# rounding, and so the same numbers as before for small networks (every UCI run). Per model, so
# that a model computes the same alone or in a stack.
EXP2_FROM = 1 << 14


def _exp2_pays(x: torch.Tensor) -> bool:
    return x.dim() > 0 and x.shape[0] > 0 and x.numel() // x.shape[0] >= EXP2_FROM


def exponential(x: torch.Tensor) -> torch.Tensor:
    """e^x, computed as 2^(x / ln 2) for tensors of at least ``EXP2_FROM`` values a model.

    torch's float32 ``exp`` on CPU runs at about a third of the speed of ``exp2`` (both
    vectorised; measured in benchmarks/README.md), and the families take it over every weight
    each step. The product rounds the exponent, so the result differs from ``exp(x)`` by at most
    about |x| 2^-24 relative (2e-6 at |x| = 20, a few float32 ulps). ``x`` carries the model
    dimension first.
    """
    if not _exp2_pays(x):
        return torch.exp(x)
    return torch.mul(x, INVERSE_LN2).exp2_()


def variance_from_log_std(log_std: torch.Tensor) -> torch.Tensor:
    """sigma^2 = exp(2 log sigma), as ``exponential`` (2^(log sigma * 2 / ln 2) from
    ``EXP2_FROM`` values a model)."""
    if not _exp2_pays(log_std):
        return torch.exp(2.0 * log_std)
    return torch.mul(log_std, TWO_OVER_LN2).exp2_()


_NEIGHBOURS: dict[tuple[float, torch.dtype, float], float] = {}


def _neighbour(value: float, dtype: torch.dtype, direction: float) -> float:
    """The float of ``dtype`` next to ``value`` towards ``direction`` (memoised)."""
    key = (value, dtype, direction)
    if key not in _NEIGHBOURS:
        toward = torch.tensor(direction, dtype=dtype)
        _NEIGHBOURS[key] = torch.nextafter(torch.tensor(value, dtype=dtype), toward).item()
    return _NEIGHBOURS[key]


# A pure function of constants, so torch.compile may call it once while tracing and keep its
# result (no graph break at the ``.item()``). This is the flag that
# ``torch.compiler.assume_constant_result`` sets; calling that decorator here would import
# torch._dynamo (about 2 s and sympy) whenever vbnn is imported, compiled or not. The fullgraph
# test of a cold cache (tests/test_kernels.py) fails if torch reads another flag.
_neighbour._dynamo_marked_constant = True  # type: ignore[attr-defined]


def clamp_derivative(grad: torch.Tensor, x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """``grad`` where low <= x <= high and 0 elsewhere: the backward of ``x.clamp(low, high)``.

    One vectorised pass: torch's hardtanh backward, which passes ``grad`` strictly inside its
    range, given the floats next to ``low`` and ``high`` so that the ends pass too, as clamp's
    do. torch's own clamp backward builds boolean masks and a ``where``, about 15 times slower
    on CPU (measured in benchmarks/README.md).
    """
    below = _neighbour(float(low), x.dtype, -math.inf)
    above = _neighbour(float(high), x.dtype, math.inf)
    return torch.ops.aten.hardtanh_backward(grad, x, below, above)


class _Clip(torch.autograd.Function):
    """clamp(x, low, high) with clamp's derivative (``clamp_derivative``) in one pass."""

    @staticmethod
    def forward(ctx, x, low, high):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(x)
        ctx.low, ctx.high = low, high
        return x.clamp(low, high)

    @staticmethod
    @once_differentiable  # no second derivatives
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        (x,) = ctx.saved_tensors
        return clamp_derivative(grad, x, ctx.low, ctx.high), None, None


def clip(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """``x.clamp(low, high)``, the same values and gradient, with a backward of one product."""
    return _Clip.apply(x, low, high)


class _LocalReparameterizationSample(torch.autograd.Function):
    """b = mu_b + x mu_W + sqrt(sigma_b^2 + x^2 sigma_W^2) * noise, sigma = exp(log_std).

    Gradients (v = sigma_b^2 + x^2 sigma_W^2, the pre-activation variance; g = dL/db):
        dL/dmu_W = x^T g,                  dL/dmu_b = sum_n g,
        dL/dv = g * noise / (2 sqrt v),
        dL/dlog sigma_W = 2 sigma_W^2 * (x^2)^T dL/dv,   likewise for the bias,
        dL/dx = g mu_W^T + 2 x * (dL/dv sigma_W^2^T).
    """

    @staticmethod
    # Parameters: autograd passes apply's inputs one by one and returns one gradient for each
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight_mean: torch.Tensor,
        weight_log_std: torch.Tensor,
        bias_mean: torch.Tensor,
        bias_log_std: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        weight_var = variance_from_log_std(weight_log_std)
        bias_var = variance_from_log_std(bias_log_std)
        x_squared = x * x
        var = batched_affine(x_squared, weight_var, bias_var)
        noise_over_std = torch.rsqrt(var).mul_(noise)  # rsqrt is faster than sqrt on CPU
        out = batched_affine(x, weight_mean, bias_mean).addcmul_(var, noise_over_std)
        ctx.save_for_backward(x, x_squared, weight_mean, weight_var, bias_var, noise_over_std)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, x_squared, weight_mean, weight_var, bias_var, noise_over_std = ctx.saved_tensors
        # twice dL/dv; the factor 1/2 cancels the 2 of d(sigma^2)/d(log sigma) and of d(x^2)/dx
        grad_var2 = grad * noise_over_std
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = _outer_or_bmm(grad_var2, weight_var).mul_(x)
            grad_x += _outer_or_bmm(grad, weight_mean)
        grad_weight_mean = _transposed_product(x, grad)
        grad_bias_mean = grad.sum(1)
        grad_weight_log_std = _transposed_product(x_squared, grad_var2).mul_(weight_var)
        grad_bias_log_std = grad_var2.sum(1).mul_(bias_var)
        return (
            grad_x,
            grad_weight_mean,
            grad_weight_log_std,
            grad_bias_mean,
            grad_bias_log_std,
            None,
        )


def batched_affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x (M, N, I) @ weight (M, I, O) + bias (M, O) -> (M, N, O).

    With O = 1 (the output layer of a regression network) and several models, a broadcast product
    and a sum: on CPU, batched matrix-vector products are slower than that for many models and
    faster for one (measured: benchmarks/README.md).
    """
    if weight.shape[-1] == 1 and weight.shape[0] > 1:
        return (x * weight.transpose(1, 2)).sum(-1, keepdim=True).add_(bias.unsqueeze(1))
    return torch.baddbmm(bias.unsqueeze(1), x, weight)


def _outer_or_bmm(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """grad (M, N, O) @ weight (M, I, O)^T; with O = 1 a broadcast product (bmm is slow there)."""
    if grad.shape[-1] == 1:
        return grad * weight.transpose(1, 2)
    return torch.bmm(grad, weight.transpose(1, 2))


def _transposed_product(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """x (M, N, I)^T @ grad (M, N, O) -> (M, I, O), in the operand order that avoids a copy."""
    if grad.shape[-1] == 1:
        return torch.bmm(grad.transpose(1, 2), x).transpose(1, 2)
    return torch.bmm(x.transpose(1, 2), grad)


def local_reparameterization_sample(
    x: torch.Tensor,
    weight_mean: torch.Tensor,
    weight_log_std: torch.Tensor,
    bias_mean: torch.Tensor,
    bias_log_std: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """One LRT draw of a mean-field dense layer's pre-activations (Kingma et al. 2015).

    b_mn = mu_m + sqrt(v_mn) * noise_mn with mu = x mu_W + mu_b, v = x^2 sigma_W^2 + sigma_b^2,
    sigma = exp(log_std); fused, with a hand-written backward.

    Args:
        x: (M, N, I) inputs.
        weight_mean, weight_log_std: (M, I, O).
        bias_mean, bias_log_std: (M, O).
        noise: (M, N, O) standard normal draws (no gradient).

    Returns:
        (M, N, O) pre-activations.
    """
    return _LocalReparameterizationSample.apply(
        x, weight_mean, weight_log_std, bias_mean, bias_log_std, noise
    )


class _GaussianFromMoments(torch.autograd.Function):
    """out = mean + sqrt(max(var, floor)) * noise, with dL/dvar = g * noise / (2 sqrt(var)) saved
    from the forward (0 where var < floor, as the clamp's derivative), so that the backward is
    one product instead of autograd's replay of the square root, the clamp and the noise."""

    @staticmethod
    def forward(ctx, mean, var, noise, floor):  # type: ignore[no-untyped-def]
        std = var.clamp_min(floor).sqrt_()
        out = torch.addcmul(mean, std, noise)
        half_noise_over_std = std.reciprocal_().mul_(noise).mul_(0.5)
        half_noise_over_std = clamp_derivative(half_noise_over_std, var, floor, math.inf)
        ctx.save_for_backward(half_noise_over_std)
        return out

    @staticmethod
    @once_differentiable  # the saved factor carries no graph: no second derivatives
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        (half_noise_over_std,) = ctx.saved_tensors
        return grad, grad * half_noise_over_std, None, None


def gaussian_from_moments(
    mean: torch.Tensor, var: torch.Tensor, noise: torch.Tensor, floor: float
) -> torch.Tensor:
    """One draw mean + sqrt(max(var, floor)) * noise of Gaussian pre-activations (the LRT's last
    step, Kingma et al. 2015), element by element; ``noise`` standard normal, no gradient;
    ``mean`` of ``var``'s shape or broadcasting against it (a zero-mean layer's bias).

    The variance is floored before the square root (whose derivative is infinite at 0); its
    gradient is 0 below the floor. Same values as the composite expression; gradients agree to
    float rounding (tests/test_kernels.py).
    """
    return _GaussianFromMoments.apply(mean, var, noise, floor)


class _Tanh(torch.autograd.Function):
    """tanh(x) = 2 sigmoid(2x) - 1, d tanh / dx = 1 - tanh^2, in place on one buffer."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = torch.mul(x, 2.0).sigmoid_().mul_(2.0).sub_(1.0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        damped = torch.mul(grad, out)
        return torch.addcmul(grad, damped, out, value=-1.0, out=damped)  # grad (1 - out^2)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) = 2 sigmoid(2x) - 1, fused with its backward.

    torch's CPU tanh is slower than its sigmoid (measured: benchmarks/README.md); this form agrees
    with torch.tanh to float32 rounding (absolute error < 1e-6, tested).
    """
    return _Tanh.apply(x)
