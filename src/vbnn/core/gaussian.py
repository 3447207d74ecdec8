"""Pure Gaussian maths used by the families: KL divergences, LRT moments, log densities.

All functions take and return plain tensors with a leading model dimension M and sum over every
other dimension, so each can be tested alone against a closed form or a Monte Carlo estimate.
"""

from __future__ import annotations

import math

import torch

from vbnn.core.kernels import variance_from_log_std

LOG_2PI = math.log(2.0 * math.pi)


def _sum_per_model(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1).sum(dim=1)


def kl_diagonal_gaussian(
    mean: torch.Tensor, std: torch.Tensor, prior_std: float | torch.Tensor
) -> torch.Tensor:
    """KL( N(mean, diag(std^2)) || N(0, prior_std^2 I) ), summed per model.

    KL = sum_i [ log(s / sigma_i) + (sigma_i^2 + mu_i^2) / (2 s^2) - 1/2 ],

    with the gradients written out (a training step evaluates it over every weight):

        dKL/dmu_i = mu_i / s^2,        dKL/dsigma_i = sigma_i / s^2 - 1 / sigma_i.

    Args:
        mean, std: (M, ...) posterior means and standard deviations (std > 0).
        prior_std: the prior std s (scalar, or a tensor broadcastable to ``mean``, e.g. (M, 1, ...)
            for one prior per model).

    Returns:
        (M,) KL per model.
    """
    prior_var = torch.as_tensor(prior_std, dtype=mean.dtype, device=mean.device) ** 2
    shared_sigma = std.shape != mean.shape and std.dim() == mean.dim()
    if shared_sigma and prior_var.numel() == 1 and not prior_var.requires_grad:
        # one sigma shared by many weights (a fixed-variance layer): its terms are summed over
        # the distinct sigmas, each counted once per weight sharing it
        shared = mean[0].numel() // std[0].numel()
        sigma_terms = _sum_per_model(std**2 / (2 * prior_var) - torch.log(std)) * shared
        count = mean[0].numel()
        squares = _HalfScaledSquares.apply(mean, prior_var.reshape(()))
        return squares + sigma_terms + count * (0.5 * torch.log(prior_var) - 0.5)
    # one prior per model, or a prior std being learned: the composite form (autograd)
    if prior_var.numel() > 1 or prior_var.requires_grad:
        terms = 0.5 * torch.log(prior_var) - torch.log(std) + (std**2 + mean**2) / (2 * prior_var)
        return _sum_per_model(terms) - 0.5 * mean[0].numel()
    return _DiagonalGaussianKL.apply(
        mean, torch.broadcast_to(std, mean.shape), prior_var.reshape(())
    )


class _HalfScaledSquares(torch.autograd.Function):
    """sum_i mu_i^2 / (2 s^2) per model, with its gradient mu / s^2 in one pass back."""

    @staticmethod
    def forward(ctx, mean, prior_var):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(mean, prior_var)
        norms = torch.linalg.vector_norm(mean.reshape(mean.shape[0], -1), dim=1)
        return norms**2 / (2 * prior_var)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        mean, prior_var = ctx.saved_tensors
        return mean * (grad / prior_var).reshape(-1, *[1] * (mean.dim() - 1)), None


class _DiagonalGaussianKL(torch.autograd.Function):
    """``kl_diagonal_gaussian`` for one prior std s shared by the models: a sum of squares, a sum
    of logs and two element-wise passes in the backward, instead of autograd's dozen temporaries."""

    @staticmethod
    def forward(ctx, mean, std, prior_var):  # type: ignore[no-untyped-def]
        models = mean.shape[0]
        flat_mean, flat_std = mean.reshape(models, -1), std.reshape(models, -1)
        squares = torch.linalg.vector_norm(flat_mean, dim=1) ** 2
        squares = squares + torch.linalg.vector_norm(flat_std, dim=1) ** 2
        count = flat_mean.shape[1]
        logs = torch.log(flat_std).sum(1)
        ctx.save_for_backward(mean, std, prior_var)
        return squares / (2 * prior_var) - logs + count * (0.5 * torch.log(prior_var) - 0.5)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        mean, std, prior_var = ctx.saved_tensors
        scale = (grad / prior_var).reshape(-1, *[1] * (mean.dim() - 1))
        grad_mean = mean * scale if ctx.needs_input_grad[0] else None
        grad_std = None
        if ctx.needs_input_grad[1]:
            per_model = grad.reshape(-1, *[1] * (std.dim() - 1))
            grad_std = torch.reciprocal(std).mul_(-per_model).addcmul_(std, scale)
        return grad_mean, grad_std, None


def kl_diagonal_gaussian_log_std(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    prior_std: float | torch.Tensor,
    *more: torch.Tensor,
) -> torch.Tensor:
    """``kl_diagonal_gaussian`` with sigma = exp(log_std), taken in log space:

        KL = sum_i [ log s - log_std_i + (exp(2 log_std_i) + mu_i^2) / (2 s^2) - 1/2 ],
        dKL/dmu_i = mu_i / s^2,        dKL/dlog_std_i = sigma_i^2 / s^2 - 1,

    which needs no logarithm and no reciprocal of sigma (the mean-field family's log
    parameterization). Shapes and ``prior_std`` as ``kl_diagonal_gaussian``; ``more`` holds
    further (mean, log_std) pairs under the same prior (a layer's bias), summed into the same
    KL in one autograd node (a small network's step pays per node, not per weight).
    """
    if len(more) % 2:
        raise ValueError("kl_diagonal_gaussian_log_std: more must hold (mean, log_std) pairs")
    pairs = [mean, log_std, *more]
    for i in range(1, len(pairs), 2):
        if pairs[i].shape != pairs[i - 1].shape:
            pairs[i] = torch.broadcast_to(pairs[i], pairs[i - 1].shape)
    prior_var = torch.as_tensor(prior_std, dtype=mean.dtype, device=mean.device) ** 2
    # one prior per model, or a prior std being learned: the composite form (autograd)
    if prior_var.numel() > 1 or prior_var.requires_grad:
        total = 0.0
        for mean, log_std in zip(pairs[::2], pairs[1::2], strict=True):
            var = prior_var  # (M, 1, ..., 1) against this pair's shape
            if var.dim() > 0:
                var = var.reshape(-1, *[1] * (mean.dim() - 1))
            terms = 0.5 * torch.log(var) - log_std + (torch.exp(2 * log_std) + mean**2) / (2 * var)
            total = total + _sum_per_model(terms) - 0.5 * mean[0].numel()
        return total
    return _DiagonalGaussianKLLogStd.apply(prior_var.reshape(()), *pairs)


class _DiagonalGaussianKLLogStd(torch.autograd.Function):
    """``kl_diagonal_gaussian_log_std`` for one prior std shared by the models, over the
    (mean, log_std) pairs that follow the prior variance."""

    @staticmethod
    def forward(ctx, prior_var, *pairs):  # type: ignore[no-untyped-def]
        models = pairs[0].shape[0]
        twice_prior_var = 2 * prior_var
        per_weight = 0.5 * torch.log(prior_var) - 0.5
        total, saved = None, []
        for mean, log_std in zip(pairs[::2], pairs[1::2], strict=True):
            # sigma^2 in the parameter's own shape: its gradient below is then a tensor of its
            # own, not a view, which autograd can add the LRT's gradient into in place
            var = variance_from_log_std(log_std)
            squares = torch.linalg.vector_norm(mean.reshape(models, -1), dim=1) ** 2
            squares = squares + var.reshape(models, -1).sum(1)
            count = mean.numel() // models
            kl = squares / twice_prior_var - log_std.reshape(models, -1).sum(1) + count * per_weight
            total = kl if total is None else total + kl  # pair by pair, as separate calls add
            saved += [mean, var]
        ctx.save_for_backward(prior_var, *saved)
        return total

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        prior_var, *saved = ctx.saved_tensors
        flat_scale = grad.div(prior_var)
        grads: list[torch.Tensor | None] = [None]
        for index, (mean, var) in enumerate(zip(saved[::2], saved[1::2], strict=True)):
            shape = (-1, *[1] * (mean.dim() - 1))
            scale = flat_scale.reshape(shape)
            grads.append(mean * scale if ctx.needs_input_grad[1 + 2 * index] else None)
            grad_log_std = None
            if ctx.needs_input_grad[2 + 2 * index]:
                grad_log_std = var.mul(scale).sub_(grad.reshape(shape))
            grads.append(grad_log_std)
        return tuple(grads)


def kl_to_isotropic_gaussian(
    mean: torch.Tensor,
    trace: torch.Tensor,
    log_det: torch.Tensor,
    prior_std: float | torch.Tensor,
) -> torch.Tensor:
    """KL( N(mean, Sigma) || N(0, s^2 I) ) from tr(Sigma) and log det(Sigma) alone.

    KL = 1/2 [ (tr(Sigma) + mean^T mean) / s^2 - D + D log s^2 - log det(Sigma) ]: a correlated
    Gaussian enters the KL to an isotropic prior only through its trace and log determinant, so
    every parameterization of the covariance (full factor, low rank plus diagonal) shares this.

    Args:
        mean: (M, D).
        trace: (M,) tr(Sigma).
        log_det: (M,) log det(Sigma).
        prior_std: s, a scalar or a (M,) tensor.

    Returns:
        (M,) KL per model.
    """
    dim = mean.shape[-1]
    prior_var = torch.as_tensor(prior_std, dtype=mean.dtype) ** 2
    squared_mean = (mean**2).sum(-1)
    return 0.5 * ((trace + squared_mean) / prior_var - dim + dim * torch.log(prior_var) - log_det)


def kl_full_gaussian(
    mean: torch.Tensor, scale_tril: torch.Tensor, prior_std: float | torch.Tensor
) -> torch.Tensor:
    """KL( N(mean, L L^T) || N(0, s^2 I) ) for mean (M, D) and a Cholesky factor L (M, D, D).

    tr(L L^T) = ||L||_F^2 and log det(L L^T) = 2 sum_i log L_ii.
    """
    trace = _sum_per_model(scale_tril**2)
    log_det = 2.0 * torch.log(torch.diagonal(scale_tril, dim1=-2, dim2=-1)).sum(-1)
    return kl_to_isotropic_gaussian(mean, trace, log_det, prior_std)


def gaussian_log_prob(
    value: torch.Tensor, mean: torch.Tensor | float, std: torch.Tensor | float
) -> torch.Tensor:
    """Elementwise log N(value | mean, std^2)."""
    std = torch.as_tensor(std, dtype=value.dtype)
    return -0.5 * (((value - mean) / std) ** 2) - torch.log(std) - 0.5 * LOG_2PI


def local_reparameterization_moments(
    x: torch.Tensor,
    weight_mean: torch.Tensor,
    weight_var: torch.Tensor,
    bias_mean: torch.Tensor,
    bias_var: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of b = x W + c for factorised Gaussian W and c (Kingma et al. 2015).

    gamma_j = c_mu_j + sum_i x_i W_mu_ij,   delta_j = c_var_j + sum_i x_i^2 W_var_ij.

    Args:
        x: (M, N, I) inputs.
        weight_mean, weight_var: (M, I, O).
        bias_mean, bias_var: (M, O).

    Returns:
        mean, variance: each (M, N, O).
    """
    mean = torch.baddbmm(bias_mean.unsqueeze(1), x, weight_mean)
    var = torch.baddbmm(bias_var.unsqueeze(1), x * x, weight_var)
    return mean, var


def log_mean_exp(values: torch.Tensor, dim: int) -> torch.Tensor:
    """log( mean(exp(values), dim) ), computed stably with logsumexp."""
    return torch.logsumexp(values, dim=dim) - math.log(values.shape[dim])
