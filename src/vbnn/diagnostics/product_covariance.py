"""Covariance of the product matrix of a deep linear network of mean-field layers.

Paper: Farquhar, Smith & Gal, "Try Depth Instead of Weight Correlations"
(Farquhar et al. 2020), section 2 and appendix A (eqs. 2-17); the blog
post (Farquhar et al. 2020 blog) ("product matrix").

A linear network ``y = W^(L) ... W^(1) x`` is written here, as in the paper's index notation
``W_ab = sum_i A_ai B_ib``, as the left-to-right product ``P = A_1 A_2 ... A_L`` of independent
random matrices (layer ``l`` of shape (K_{l-1}, K_l)). The entries of ``P`` are flattened row-major
(entry (a, b) -> index ``a * cols + b``); covariance tensors are kept 4-index,
``cov[a, b, c, d] = Cov(P_ab, P_cd)``, and flattened to (rows*cols, rows*cols) for display.

Derivation (re-derived; the extracted eqs. 14 and 17 are garbled). For independent X (R, K) and
Y (K, C), with any covariances inside each factor, E[X_ai X_cj Y_ib Y_jd] factorises, so

    Cov((XY)_ab, (XY)_cd) = sum_ij  Cov(X_ai, X_cj) Cov(Y_ib, Y_jd)
                                  + E[X_ai] E[X_cj] Cov(Y_ib, Y_jd)
                                  + E[Y_ib] E[Y_jd] Cov(X_ai, X_cj)              (eq. 14)

and E[XY] = E[X] E[Y]. With mean-field factors, Cov(A_ai, A_cj) = d_ac d_ij s^A_ai^2, this gives
for two layers

    Cov(W_ab, W_cd) = sum_i [ d_ac d_bd s^A_ai^2 s^B_ib^2              (the entry with itself)
                              + d_ac s^A_ai^2 m^B_ib m^B_id            (same row a = c)
                              + d_bd s^B_ib^2 m^A_ai m^A_ci ]          (same column b = d)

so entries that share neither a row nor a column are uncorrelated. Applying eq. 14 again to
W^(3) = W^(2) C (W^(2) and C independent) gives eq. 17; its term
sum_ik m^C_ib m^C_id s^B_ki^2 m^A_ak m^A_ck carries no Kronecker delta on a, b, c, d, so with
non-zero means every pair of entries of a product of three or more layers is correlated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _check_factor(name: str, mean: torch.Tensor, covariance: torch.Tensor) -> None:
    if mean.dim() != 2:
        raise ValueError(f"{name}: mean must be a matrix (R, C), got shape {tuple(mean.shape)}")
    if covariance.shape != (*mean.shape, *mean.shape):
        raise ValueError(
            f"{name}: covariance must have shape (R, C, R, C) = {(*mean.shape, *mean.shape)}, "
            f"got {tuple(covariance.shape)}"
        )


def mean_field_covariance(std: torch.Tensor) -> torch.Tensor:
    """The 4-index covariance of a mean-field matrix: Cov(A_ai, A_cj) = d_ac d_ij std_ai^2.

    Args:
        std: (R, C) standard deviations.

    Returns:
        (R, C, R, C) covariance tensor.
    """
    if std.dim() != 2:
        raise ValueError(f"mean_field_covariance: std must be (R, C), got {tuple(std.shape)}")
    rows, cols = std.shape
    return torch.diag((std**2).reshape(-1)).reshape(rows, cols, rows, cols)


def product_moments(
    mean_left: torch.Tensor,
    covariance_left: torch.Tensor,
    mean_right: torch.Tensor,
    covariance_right: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and covariance of X Y for independent random matrices X and Y (eq. 14 of Farquhar et al.
    2020).

    Args:
        mean_left: (R, K) E[X]; covariance_left: (R, K, R, K) Cov(X_ai, X_cj).
        mean_right: (K, C) E[Y]; covariance_right: (K, C, K, C) Cov(Y_ib, Y_jd).

    Returns:
        mean (R, C) and covariance (R, C, R, C) of the product.
    """
    _check_factor("product_moments left", mean_left, covariance_left)
    _check_factor("product_moments right", mean_right, covariance_right)
    if mean_left.shape[1] != mean_right.shape[0]:
        raise ValueError(
            f"product_moments: inner sizes differ, left {tuple(mean_left.shape)} "
            f"right {tuple(mean_right.shape)}"
        )
    both = torch.einsum("aicj,ibjd->abcd", covariance_left, covariance_right)
    right_only = torch.einsum("ai,cj,ibjd->abcd", mean_left, mean_left, covariance_right)
    left_only = torch.einsum("ib,jd,aicj->abcd", mean_right, mean_right, covariance_left)
    return mean_left @ mean_right, both + right_only + left_only


def analytic_product_covariance(
    means: Sequence[torch.Tensor], stds: Sequence[torch.Tensor]
) -> torch.Tensor:
    """Exact covariance of P = A_1 ... A_L for independent mean-field layers, any depth L.

    Applies eq. 14 of Farquhar et al. 2020 left to right: P_l = P_{l-1} A_l with P_{l-1} independent
    of A_l.

    Args:
        means, stds: L matrices each, layer l of shape (K_{l-1}, K_l).

    Returns:
        (R, C, R, C) covariance of the product's entries.
    """
    if len(means) == 0 or len(means) != len(stds):
        raise ValueError(
            f"analytic_product_covariance: need as many means as stds (>= 1), "
            f"got {len(means)} and {len(stds)}"
        )
    mean, covariance = means[0], mean_field_covariance(stds[0])
    for layer_mean, layer_std in zip(means[1:], stds[1:], strict=True):
        mean, covariance = product_moments(
            mean, covariance, layer_mean, mean_field_covariance(layer_std)
        )
    return covariance


def two_layer_covariance(
    mean_a: torch.Tensor, std_a: torch.Tensor, mean_b: torch.Tensor, std_b: torch.Tensor
) -> torch.Tensor:
    """The explicit mean-field form of eq. 14 for W = A B (see the module docstring).

    Args:
        mean_a, std_a: (R, K); mean_b, std_b: (K, C).

    Returns:
        (R, C, R, C) covariance.
    """
    rows, cols = mean_a.shape[0], mean_b.shape[1]
    eye_rows = torch.eye(rows, dtype=mean_a.dtype)
    eye_cols = torch.eye(cols, dtype=mean_a.dtype)
    var_a, var_b = std_a**2, std_b**2
    itself = torch.einsum("ai,ib,ac,bd->abcd", var_a, var_b, eye_rows, eye_cols)
    same_row = torch.einsum("ai,ib,id,ac->abcd", var_a, mean_b, mean_b, eye_rows)
    same_column = torch.einsum("ib,ai,ci,bd->abcd", var_b, mean_a, mean_a, eye_cols)
    return itself + same_row + same_column


def three_layer_covariance(
    means: Sequence[torch.Tensor], stds: Sequence[torch.Tensor]
) -> torch.Tensor:
    """The explicit form of eq. 17 for W = A B C with mean-field A, B, C.

    Cov(W_ab, W_cd) = d_bd sum_i s^C_ib^2 [Cov(V_ai, V_ci) + m^V_ai m^V_ci]
                      + sum_ij m^C_ib m^C_jd Cov(V_ai, V_cj),
    where V = A B has mean m^V = m^A m^B and the two-layer covariance above.

    Args:
        means, stds: three matrices each, (R, K1), (K1, K2), (K2, C).
    """
    if len(means) != 3 or len(stds) != 3:
        raise ValueError("three_layer_covariance: need exactly three means and three stds")
    inner = two_layer_covariance(means[0], stds[0], means[1], stds[1])
    inner_mean = means[0] @ means[1]
    mean_c, var_c = means[2], stds[2] ** 2
    cols = mean_c.shape[1]
    diagonal_inner = torch.einsum("aici->aci", inner) + torch.einsum(
        "ai,ci->aci", inner_mean, inner_mean
    )
    eye = torch.eye(cols, dtype=var_c.dtype)
    column_term = torch.einsum("ib,aci,bd->abcd", var_c, diagonal_inner, eye)
    return column_term + torch.einsum("ib,jd,aicj->abcd", mean_c, mean_c, inner)


def random_mean_field_layers(
    depth: int,
    size: int = 4,
    mean_bound: float = 0.1,
    std: float = 0.5,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Section 2.2 of Farquhar et al. 2020: ``depth`` square layers, means U(-mean_bound,
    mean_bound), fixed std."""
    if depth < 1 or size < 1:
        raise ValueError(
            f"random_mean_field_layers: depth and size must be >= 1, got {depth}, {size}"
        )
    if not std > 0:
        raise ValueError(f"random_mean_field_layers: std must be > 0, got {std}")
    means = [
        (2 * torch.rand(size, size, generator=generator, dtype=dtype) - 1) * mean_bound
        for _ in range(depth)
    ]
    return means, [torch.full((size, size), std, dtype=dtype) for _ in range(depth)]


def sample_products(
    means: Sequence[torch.Tensor],
    stds: Sequence[torch.Tensor],
    samples: int = 10_000,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draws of the product matrix: every layer sampled independently, then multiplied.

    Returns:
        (samples, R * C) flattened (row-major) products.
    """
    if samples < 2:
        raise ValueError(f"sample_products: samples must be >= 2, got {samples}")
    product = None
    for mean, std in zip(means, stds, strict=True):
        noise = torch.randn(samples, *mean.shape, generator=generator, dtype=mean.dtype)
        layer = mean + std * noise
        product = layer if product is None else product @ layer
    assert product is not None
    return product.reshape(samples, -1)


def monte_carlo_covariance(samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample covariance of flattened products and the standard error of each entry.

    The standard error of entry (p, q) is std_n[(x_p - xbar_p)(x_q - xbar_q)] / sqrt(n), the
    delta-method error of a sample covariance (valid when fourth moments are finite, as they are
    for products of Gaussians).

    Args:
        samples: (N, D).

    Returns:
        covariance (D, D) with the 1/(N-1) normalisation, standard error (D, D).
    """
    centred = samples - samples.mean(0)
    n = samples.shape[0]
    cross = centred.unsqueeze(2) * centred.unsqueeze(1)
    covariance = cross.sum(0) / (n - 1)
    return covariance, cross.std(0) / math.sqrt(n)


def flatten_covariance(covariance: torch.Tensor) -> torch.Tensor:
    """(R, C, R, C) -> (R*C, R*C), entries in row-major order."""
    rows, cols = covariance.shape[:2]
    return covariance.reshape(rows * cols, rows * cols)


def covariance_support(covariance: torch.Tensor, relative_tolerance: float = 1e-10) -> torch.Tensor:
    """Which pairs of product entries have non-zero covariance.

    Args:
        covariance: (D, D) (or (R, C, R, C), flattened first).
        relative_tolerance: an entry counts as zero if below this times the largest magnitude.

    Returns:
        (D, D) boolean matrix, True where Cov(P_p, P_q) != 0.
    """
    if covariance.dim() == 4:
        covariance = flatten_covariance(covariance)
    return covariance.abs() > relative_tolerance * covariance.abs().max()


def expected_support(depth: int, rows: int, cols: int) -> torch.Tensor:
    """The support implied by the derivation for generic non-zero means (D, D boolean).

    Depth 1: the diagonal; depth 2: entries sharing a row or a column; depth >= 3: every pair.
    """
    if depth < 1:
        raise ValueError(f"expected_support: depth must be >= 1, got {depth}")
    row = torch.arange(rows).repeat_interleave(cols)
    col = torch.arange(cols).repeat(rows)
    same_row = row.unsqueeze(1) == row.unsqueeze(0)
    same_col = col.unsqueeze(1) == col.unsqueeze(0)
    if depth == 1:
        return same_row & same_col
    if depth == 2:
        return same_row | same_col
    return torch.ones(rows * cols, rows * cols, dtype=torch.bool)
