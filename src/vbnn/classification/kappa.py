"""The kappa criterion and sparse ensembles (Neklyudov et al. 2018 section 5, eq. 16).

    kappa_ij = sigma_ij^2 | d^2/dW_ij^2 sum_n log p(y_n | x_n, W, W_net) |  at W = M,

for the weights W of one dense layer, the rest of the network W_net at its means (MEAN mode). We
take the magnitude of the second derivative: the criterion measures how far from linear the
log-likelihood is over (M - sigma, M + sigma), and the paper plots log10 kappa.

Exact Hessian diagonal, no estimator: the pre-activation b_n = a_n W + c of example n is linear in
W, so d^2 log p_n / dW_ij^2 = a_ni^2 d^2 log p_n / db_nj^2, and

    sum_n d^2 log p_n / dW_ij^2 = sum_n a_ni^2 h_nj,   h_nj = [Hessian of log p_n in b_n]_jj,

where h_nj is computed exactly by double backpropagation (one pass per output unit j over the
whole batch; the examples do not interact, so no per-example loop is needed).

Sparse ensemble: weights with kappa below a threshold are replaced by their means (or zeros), the
others keep their noise (Neklyudov et al. 2018 Fig. 5).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vbnn.layers.shell import VariationalLayer

LogLikelihood = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def categorical_log_likelihood(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label]: logits (M, N, C), labels (N,) -> (M, N)."""
    log_probs = torch.log_softmax(logits, -1)
    index = labels.expand(logits.shape[0], -1).unsqueeze(-1)
    return log_probs.gather(-1, index).squeeze(-1)


def pre_activation_hessian_diagonal(
    head: Callable[[torch.Tensor], torch.Tensor],
    pre_activation: torch.Tensor,
    targets: torch.Tensor,
    log_likelihood: LogLikelihood,
) -> torch.Tensor:
    """h_nj = d^2 log p(y_n | head(b_n)) / d b_nj^2 for every example, exactly.

    Examples (and models) do not interact, so the Hessian of L = sum_{m,n} log p_mn in b is block
    diagonal over (m, n): the gradient of sum_{m,n} dL/db_mnj in b, read at (m, n, j), is h_mnj.
    One double-backward pass per output unit j (O passes over the batch).

    Args:
        head: maps pre-activations (M, N, O) to the network output (M, N, ...).
        pre_activation: (M, N, O).
        targets: (N, ...) one target per example.
        log_likelihood: (output (M, N, ...), targets (N, ...)) -> (M, N).

    Returns:
        (M, N, O).
    """
    b = pre_activation.detach().requires_grad_(True)
    with torch.enable_grad():
        total = log_likelihood(head(b), targets).sum()
        (gradient,) = torch.autograd.grad(total, b, create_graph=True)
        diagonal = torch.zeros_like(b)
        width = b.shape[-1]
        for j in range(width):
            (column,) = torch.autograd.grad(
                gradient[..., j].sum(), b, retain_graph=j < width - 1, allow_unused=True
            )
            if column is not None:
                diagonal[..., j] = column[..., j]
    return diagonal.detach()


def dense_layer_kappa(
    layer: VariationalLayer,
    inputs: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    log_likelihood: LogLikelihood = categorical_log_likelihood,
) -> torch.Tensor:
    """kappa (M, I, O) of a dense layer (eq. 16) from its inputs a (M, N, I) over the N examples.

    ``head`` maps the layer's pre-activations to the network output with W_net at its means.
    """
    if layer.kernel_size is not None:
        raise ValueError("kappa is implemented for dense layers (the paper's variance layer)")
    inputs = inputs.detach()
    with torch.no_grad():
        var = layer.weight_moments()[1]
        pre_activation = layer(inputs, "mean")
    h = pre_activation_hessian_diagonal(head, pre_activation, targets, log_likelihood)
    curvature = torch.bmm((inputs * inputs).transpose(1, 2), h)  # sum_n a_ni^2 h_nj
    return var.detach() * curvature.abs()


def count_above(kappa: torch.Tensor, log10_threshold: float = 1.5) -> torch.Tensor:
    """Number of weights with log10 kappa > threshold, per model (Neklyudov et al. 2018 Fig. 4)."""
    return (kappa > 10.0**log10_threshold).reshape(kappa.shape[0], -1).sum(1)


def sparse_ensemble_masks(
    layer: VariationalLayer, kappa: torch.Tensor, threshold: float, replace: str = "mean"
) -> float:
    """Weights with kappa < threshold lose their noise: set to their means (``replace="mean"``)
    or to zero (``"zero"``). Returns the fraction of the layer's weights replaced."""
    if kappa.shape != layer.weight_moments()[0].shape:
        raise ValueError(f"kappa shape {tuple(kappa.shape)} does not match the layer's weights")
    mask = kappa < threshold
    layer.to_mean, layer.to_zero = (mask, None) if replace == "mean" else (None, mask)
    if replace not in ("mean", "zero"):
        raise ValueError(f"replace must be 'mean' or 'zero', got {replace!r}")
    return float(mask.float().mean())


def clear_masks(layer: VariationalLayer) -> None:
    layer.to_mean = layer.to_zero = None
