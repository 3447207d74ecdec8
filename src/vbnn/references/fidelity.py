"""Fidelity of a predictive to a reference predictive (an HMC posterior's, say), per input.

Izmailov et al. 2021 and the NeurIPS 2021 approximate-inference competition (Wilson et al. 2022)
judge an approximate posterior by how close its predictive is to the reference one on test
inputs, rather than by how well either fits the labels:

* classification, predictives p_n and q_n (N, C) on the simplex:
  agreement = (1 / N) sum_n 1[argmax_c p_nc = argmax_c q_nc] (ties to the lowest class), and
  total variation = (1 / N) sum_n (1 / 2) sum_c |p_nc - q_nc|, in [0, 1];
* regression, a one-dimensional predictive per input given by samples, the Wasserstein distance
  between the two empirical distributions, averaged over inputs
  (``predictive_wasserstein``); or, for Gaussian predictives, its closed form
  (``gaussian_predictive_wasserstein``).

The competition asked for 1000 predictive samples per test input and names its regression
metric W2, but the function of its published scoring script that computes it calls
``scipy.stats.wasserstein_distance``, the order-1 distance W1 between the two empirical
distributions, averages that over inputs and negates it as a score.
``predictive_wasserstein(..., order=1)`` gives that average (unnegated), ``order=2`` the W2.

These compare predictives in output space; ``references.wasserstein`` measures distances between
weight-space samples (optimal transport in D dimensions with POT).
"""

from __future__ import annotations

import torch

from vbnn.metrics import _check_floating, _check_probabilities


def _check_pair(probabilities: torch.Tensor, reference: torch.Tensor) -> None:
    _check_probabilities(probabilities, "(N, C)")
    _check_probabilities(reference, "(N, C)")
    if probabilities.shape != reference.shape:
        raise ValueError(
            f"probabilities {tuple(probabilities.shape)} and reference "
            f"{tuple(reference.shape)} must have the same (N, C) shape"
        )


def agreement(probabilities: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Share of inputs where both predictives pick the same class (Izmailov et al. 2021).

    Args:
        probabilities: (N, C) the predictive under test.
        reference: (N, C) the reference predictive.

    Returns:
        0-d tensor in [0, 1]; 1 for a predictive against itself.
    """
    _check_pair(probabilities, reference)
    same = probabilities.argmax(-1) == reference.argmax(-1)
    return same.to(probabilities.dtype).mean()


def total_variation(probabilities: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Mean over inputs of the total variation distance (1 / 2) sum_c |p_nc - q_nc|.

    Per input it equals 1 - sum_c min(p_nc, q_nc), the largest difference in probability the
    two predictives give one set of classes.

    Args:
        probabilities: (N, C) the predictive under test.
        reference: (N, C) the reference predictive.

    Returns:
        0-d tensor in [0, 1]; 0 for a predictive against itself, 1 for disjoint supports.
    """
    _check_pair(probabilities, reference)
    return 0.5 * (probabilities - reference).abs().sum(-1).mean()


def empirical_wasserstein_1d(
    samples: torch.Tensor, reference: torch.Tensor, order: float = 2
) -> torch.Tensor:
    """Per input, the order-p Wasserstein distance between two one-dimensional empirical
    distributions, from their quantile functions.

    W_p(F, G)^p = int_0^1 |F^-1(u) - G^-1(u)|^p du. The empirical quantile functions are steps:
    F^-1(u) = x_(i), the i-th smallest of the S samples, for u in ((i - 1) / S, i / S]. The
    integral is a finite sum over the merged breakpoints {i / S} and {j / R}; with S = R it is
    (1 / S) sum_i |x_(i) - y_(i)|^p, sorted samples matched in order.

    Args:
        samples: (N, S) S predictive samples at each of N inputs.
        reference: (N, R) R reference samples at the same inputs.
        order: p >= 1.

    Returns:
        (N,) distances, float64; 0 where the two sets hold the same values.
    """
    for name, tensor in (("samples", samples), ("reference", reference)):
        _check_floating(name, tensor)
        if tensor.ndim != 2 or 0 in tensor.shape or not bool(torch.isfinite(tensor).all()):
            raise ValueError(
                f"{name} must be a finite (N, S) tensor with no empty dimension; got shape "
                f"{tuple(tensor.shape)}"
            )
    if samples.shape[0] != reference.shape[0]:
        raise ValueError(
            f"samples {tuple(samples.shape)} and reference {tuple(reference.shape)} must have "
            "the same number of inputs N"
        )
    if isinstance(order, bool) or not isinstance(order, int | float) or order < 1:
        raise ValueError(f"order must be a number >= 1; got {order!r}")
    first, second = samples.double().sort(-1).values, reference.double().sort(-1).values
    size_first, size_second = first.shape[1], second.shape[1]
    # breakpoints in units of 1 / (S R): i R and j S; on (a, b] the quantiles are the
    # (a // R)-th and (a // S)-th sorted samples (0-based)
    device = first.device
    ends_first = torch.arange(1, size_first + 1, device=device) * size_second
    ends_second = torch.arange(1, size_second + 1, device=device) * size_first
    ends = torch.cat([ends_first, ends_second]).unique()
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    widths = (ends - starts).double() / (size_first * size_second)
    gaps = (first[:, starts // size_second] - second[:, starts // size_first]).abs()
    return ((gaps**order) * widths).sum(-1) ** (1 / order)


def predictive_wasserstein(
    samples: torch.Tensor, reference: torch.Tensor, order: float = 2
) -> torch.Tensor:
    """Mean over inputs of ``empirical_wasserstein_1d``: the competition's regression metric
    (order 1 is what its scoring script computes, order 2 the W2 it names).

    Args:
        samples: (N, S) predictive samples per input.
        reference: (N, R) reference samples per input.
        order: p >= 1.

    Returns:
        0-d float64 tensor, >= 0.
    """
    return empirical_wasserstein_1d(samples, reference, order).mean()


def gaussian_predictive_wasserstein(
    mean: torch.Tensor, std: torch.Tensor, reference_mean: torch.Tensor, reference_std: torch.Tensor
) -> torch.Tensor:
    """Mean over inputs of W2 between the Gaussians N(m_n, s_n^2) and N(m'_n, s'_n^2):

        W2 = sqrt((m_n - m'_n)^2 + (s_n - s'_n)^2),

    the one-dimensional case of Dowson & Landau 1982's closed form
    (``references.gaussian_gap.wasserstein2_gaussian``): the quantile functions m + s Phi^-1(u)
    differ by (m - m') + (s - s') Phi^-1(u), whose square integrates to the above.

    Args:
        mean, std: (N,) the predictive under test; std > 0.
        reference_mean, reference_std: (N,) the reference; std > 0.

    Returns:
        0-d tensor, >= 0.
    """
    tensors = (mean, std, reference_mean, reference_std)
    names = ("mean", "std", "reference_mean", "reference_std")
    for name, tensor in zip(names, tensors, strict=True):
        _check_floating(name, tensor)
        if tensor.ndim != 1 or tensor.shape != mean.shape or len(tensor) == 0:
            raise ValueError(
                f"{name} must be (N,) = {tuple(mean.shape)} like mean; got {tuple(tensor.shape)}"
            )
    if not bool((std > 0).all() and (reference_std > 0).all()):
        raise ValueError("std and reference_std must be positive")
    return ((mean - reference_mean) ** 2 + (std - reference_std) ** 2).sqrt().mean()
