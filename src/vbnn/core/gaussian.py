"""Pure Gaussian maths used by the families: KL divergences, LRT moments, log densities.

All functions take and return plain tensors with a leading model dimension M and sum over every
other dimension, so each can be tested alone against a closed form or a Monte Carlo estimate.
"""

from __future__ import annotations

import math

import torch

LOG_2PI = math.log(2.0 * math.pi)


def _sum_per_model(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1).sum(dim=1)


def kl_diagonal_gaussian(
    mean: torch.Tensor, std: torch.Tensor, prior_std: float | torch.Tensor
) -> torch.Tensor:
    """KL( N(mean, diag(std^2)) || N(0, prior_std^2 I) ), summed per model.

    KL = sum_i [ log(s / sigma_i) + (sigma_i^2 + mu_i^2) / (2 s^2) - 1/2 ].

    Args:
        mean, std: (M, ...) posterior means and standard deviations (std > 0).
        prior_std: the prior std s (scalar, or broadcastable to ``mean``).

    Returns:
        (M,) KL per model.
    """
    prior_var = torch.as_tensor(prior_std, dtype=mean.dtype) ** 2
    terms = 0.5 * torch.log(prior_var) - torch.log(std) + (std**2 + mean**2) / (2 * prior_var)
    return _sum_per_model(terms) - 0.5 * mean[0].numel()


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
