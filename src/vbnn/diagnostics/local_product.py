"""The local product matrix of a piecewise-linear network; its covariance under mean-field weights.

Farquhar et al. 2020 blog, "New tool: local product matrix"; Farquhar et al. 2020 (the linear case,
``vbnn.diagnostics.product_covariance``). A network with activation phi(h) = max(h, 0) +
slope * min(h, 0) (slope 0: ReLU, 0 < slope < 1: LeakyReLU, 1: linear), row-vector convention

    h_0 = x,  a_l = h_{l-1} W_l + b_l,  h_l = phi(a_l)  (l < L),  f(x) = h_{L-1} W_L + b_L,

is linear near any x off the activation boundaries: f(x') = x' M(x) + c(x) there, with the
**local product matrix**

    M(x) = W_1 D_1(x) W_2 D_2(x) ... D_{L-1}(x) W_L,   D_l(x) = diag(phi'(a_l(x))) in {slope, 1},

the Jacobian of f at x ((I, O) in this convention). Under mean-field weights M(x) is a random
matrix whose pattern D_l depends on the weights through x. Two cases:

* **pattern held fixed** (the pattern of the mean network at x): W_l D_l is again a mean-field
  matrix (means m_l D_l, stds s_l D_l: a column scaling), so the exact recursion of
  ``product_covariance`` applies: with two weight layers entries sharing neither a row nor a
  column are uncorrelated (eq. 14 of Farquhar et al. 2020), and from three on every pair is (for
  generic means and slope > 0).
* **pattern drawn with the weights** (the actual local product matrix): for two layers
  M_ab = sum_i A_ai d_i B_ib with d_i = phi'((x A + b)_i) a function of column i of A and b_i
  only, so for a != c, b != d

      Cov(M_ab, M_cd) = sum_i m^B_ib m^B_id Cov(A_ai d_i, A_ci d_i),

  zero when the pattern cannot flip (d_i constant: inputs far from the boundaries relative to the
  weights' spread, the typical case of a trained network) and small otherwise; from three layers
  on every pair is correlated for typical inputs, as in the linear case (blog).

``tests/test_local_product.py`` checks M(x) against the Jacobian of f, the fixed-pattern Monte
Carlo covariance against the exact recursion, the depth-2 zero pattern, and that three layers
correlate every pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vbnn.diagnostics.product_covariance import analytic_product_covariance


@dataclass(frozen=True)
class MeanFieldNetwork:
    """Means and stds of every weight (I_l, O_l) and bias (O_l,) of a mean-field network.

    Attributes:
        weight_means, weight_stds, bias_means, bias_stds: one tensor per layer.
        slope: the activation's slope below zero (0 ReLU, 1 linear).
    """

    weight_means: Sequence[torch.Tensor]
    weight_stds: Sequence[torch.Tensor]
    bias_means: Sequence[torch.Tensor]
    bias_stds: Sequence[torch.Tensor]
    slope: float

    def __post_init__(self) -> None:
        counts = {len(self.weight_means), len(self.weight_stds)}
        counts |= {len(self.bias_means), len(self.bias_stds)}
        if len(counts) != 1 or not self.weight_means:
            raise ValueError("MeanFieldNetwork: need one weight and bias mean and std per layer")
        for number, (weight, bias) in enumerate(
            zip(self.weight_means, self.bias_means, strict=True)
        ):
            if weight.dim() != 2 or bias.shape != weight.shape[1:]:
                raise ValueError(
                    f"MeanFieldNetwork: layer {number} weight must be (I, O) and bias (O,), got "
                    f"{tuple(weight.shape)} and {tuple(bias.shape)}"
                )
        if not 0 <= self.slope <= 1:
            raise ValueError(f"MeanFieldNetwork: slope must be in [0, 1], got {self.slope}")

    def sample(
        self, samples: int, generator: torch.Generator
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Independent draws: weights (S, I_l, O_l) and biases (S, O_l) per layer."""

        def draw(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
            noise = torch.randn(samples, *mean.shape, generator=generator, dtype=mean.dtype)
            return mean + std * noise

        weights = [draw(m, s) for m, s in zip(self.weight_means, self.weight_stds, strict=True)]
        biases = [draw(m, s) for m, s in zip(self.bias_means, self.bias_stds, strict=True)]
        return weights, biases


def activation_pattern(
    weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor], x: torch.Tensor, slope: float
) -> list[torch.Tensor]:
    """phi'(a_l(x)) for every hidden layer: (..., O_l) with entries 1 or ``slope``.

    Args:
        weights, biases: per layer (..., I_l, O_l) and (..., O_l) (a leading sample dim or none).
        x: (I,) input.
    """
    hidden, pattern = x, []
    for weight, bias in zip(weights[:-1], biases[:-1], strict=True):
        pre = (hidden.unsqueeze(-2) @ weight).squeeze(-2) + bias
        slopes = torch.where(pre > 0, torch.ones_like(pre), torch.full_like(pre, slope))
        pattern.append(slopes)
        hidden = pre * slopes
    return pattern


def local_product(weights: Sequence[torch.Tensor], pattern: Sequence[torch.Tensor]) -> torch.Tensor:
    """M = W_1 D_1 ... D_{L-1} W_L (..., I, O); weights (..., I_l, O_l), pattern (..., O_l)."""
    if len(pattern) != len(weights) - 1:
        raise ValueError(
            f"local_product: need {len(weights) - 1} pattern vectors, got {len(pattern)}"
        )
    product = weights[0]
    for slopes, weight in zip(pattern, weights[1:], strict=True):
        product = (product * slopes.unsqueeze(-2)) @ weight
    return product


def sample_local_products(
    network: MeanFieldNetwork,
    x: torch.Tensor,
    samples: int,
    generator: torch.Generator,
    fixed_pattern: bool = False,
) -> torch.Tensor:
    """Draws of M(x) under the mean-field weights, (S, I * O) flattened row-major.

    Args:
        fixed_pattern: hold D_l at the mean network's pattern at x instead of each draw's own.
    """
    if x.shape != network.weight_means[0].shape[:1]:
        raise ValueError(
            f"sample_local_products: x must have shape ({network.weight_means[0].shape[0]},), "
            f"got {tuple(x.shape)}"
        )
    weights, biases = network.sample(samples, generator)
    if fixed_pattern:
        pattern = activation_pattern(network.weight_means, network.bias_means, x, network.slope)
    else:
        pattern = activation_pattern(weights, biases, x, network.slope)
    return local_product(weights, pattern).reshape(samples, -1)


def fixed_pattern_covariance(network: MeanFieldNetwork, x: torch.Tensor) -> torch.Tensor:
    """Exact (I, O, I, O) covariance of M(x) with the mean network's pattern held fixed:
    the product of the mean-field matrices W_l D_l (column-scaled means and stds)."""
    pattern = activation_pattern(network.weight_means, network.bias_means, x, network.slope)
    scales = [*pattern, torch.ones_like(network.bias_means[-1])]
    means = [m * d for m, d in zip(network.weight_means, scales, strict=True)]
    stds = [s * d for s, d in zip(network.weight_stds, scales, strict=True)]
    return analytic_product_covariance(means, stds)
