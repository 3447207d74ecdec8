"""FC: full-covariance Gaussian over all weights and biases of a dense layer.

The layer's D = (I + 1) O parameters are the rows of W~ = [W; b] (shape (I + 1, O)) read in
row-major order, index d = i O + o. q(vec W~) = N(m, L L^T) with L lower triangular,
L = A + diag(exp(l)) with A strictly lower triangular: a gradient hook keeps A's upper part and
diagonal at exactly zero (Adam never moves an entry whose gradient is always zero), so no
triangular mask is applied on the hot path, and the diagonal is positive by the exponential.
A draw is m + L eps, eps ~ N(0, I_D): one weight sample per model shared by all examples,
since a full covariance admits no cheap local reparameterization (000_e87e55bc25ea4726.txt,
section 2, names this as a likely cause of FC's weaker results). ``exact_lrt = False`` tells the
shell so. A convolution would need a factor over (C kh kw + 1) O parameters per layer; this
family is dense only and says so.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from vbnn.core.contracts import Prior
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import Moments, VariationalLayer


def full_covariance_output_moments(
    x: torch.Tensor, mean: torch.Tensor, scale_tril: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact marginal mean and variance of every output of x W~ under q = N(m, L L^T).

    Args:
        x: (M, N, I) inputs.
        mean: (M, I + 1, O) means of W~ = [W; b].
        scale_tril: (M, D, D), D = (I + 1) O, in the row-major layout of W~.

    Returns:
        mean, variance of the outputs: each (M, N, O).
    """
    models, rows, outputs = mean.shape
    x1 = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)  # (M, N, I + 1)
    covariance = (scale_tril @ scale_tril.transpose(-1, -2)).reshape(
        models, rows, outputs, rows, outputs
    )
    per_output = torch.diagonal(covariance, dim1=2, dim2=4)  # (M, I + 1, I + 1, O)
    variance = torch.einsum("mni,mijo,mnj->mno", x1, per_output, x1)
    return x1 @ mean, variance


def _strictly_lower(gradient: torch.Tensor) -> torch.Tensor:
    return torch.tril(gradient, -1)


class FullCovariance(VariationalLayer):
    """Dense layer with a full-covariance Gaussian over (W, b); weight samples in SAMPLE mode.

    The other arguments are those of ``MeanField``; ``kernel_size`` and ``bias=False`` are
    refused.

    Args:
        posterior_std: initial std of every parameter (the diagonal of L; A starts at zero).
    """

    family_name = "fc"
    exact_lrt = False

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        posterior_std: float = 1e-4,
        dtype: torch.dtype | None = None,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        if self.operator.is_conv:
            raise ValueError(
                "FullCovariance is dense only: a convolution's full factor over (C kh kw + 1) O "
                "parameters is not supported; use 'mf' or 'gd' for convolutions"
            )
        if not self.has_bias:
            raise ValueError("FullCovariance: bias=False is not supported (the factor covers b)")
        if not posterior_std > 0:
            raise ValueError(f"FullCovariance: posterior_std must be > 0, got {posterior_std}")
        self.dim = (in_features + 1) * out_features
        weight = self.initial_mean(dtype)
        dtype = weight.dtype
        self.mean = nn.Parameter(torch.cat([weight, self.zeros_bias(dtype).unsqueeze(1)], dim=1))
        self.scale_lower = nn.Parameter(
            torch.zeros(self.num_models, self.dim, self.dim, dtype=dtype)
        )
        self.scale_lower.register_hook(_strictly_lower)
        self.scale_log_diagonal = nn.Parameter(
            torch.full((self.num_models, self.dim), math.log(posterior_std), dtype=dtype)
        )

    def scale_tril(self) -> torch.Tensor:
        """The Cholesky factor L (M, D, D)."""
        return torch.tril(self.scale_lower, -1) + torch.diag_embed(self.scale_log_diagonal.exp())

    def scale_noise(self, eps: torch.Tensor) -> torch.Tensor:
        """L eps for eps (M, D) -> (M, D)."""
        lower = (self.scale_lower @ eps.unsqueeze(-1)).squeeze(-1)
        return lower + self.scale_log_diagonal.exp() * eps

    def _marginal_variance(self) -> torch.Tensor:
        return self.scale_tril().pow(2).sum(-1).view_as(self.mean)

    def means(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean[:, :-1], self.mean[:, -1]

    def weight_moments(self) -> Moments:
        return self.mean[:, :-1], self._marginal_variance()[:, :-1]

    def bias_moments(self) -> Moments:
        return self.mean[:, -1], self._marginal_variance()[:, -1]

    def sample(self, noise: NoiseSource) -> Moments:
        eps = noise.randn(self.dim, dtype=self.mean.dtype, device=self.mean.device)
        weight = self.mean + self.scale_noise(eps).view_as(self.mean)
        return weight[:, :-1], weight[:, -1]

    @torch.no_grad()
    def load_means(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """The means from an ``nn.Linear`` weight (O, I) and bias (O,) (see the shell)."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"load_means: weight {tuple(weight.shape)}, expected "
                f"{(self.out_features, self.in_features)}"
            )
        self.mean[:, :-1].copy_(weight.t().expand_as(self.mean[:, :-1]))
        if bias is not None:
            self.mean[:, -1].copy_(bias.expand_as(self.mean[:, -1]))

    def kl(self, prior: Prior) -> torch.Tensor:
        return prior.kl_full(self.mean.flatten(1), self.scale_lower, self.scale_log_diagonal)

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        std = self.scale_tril().pow(2).sum(-1).sqrt().view_as(self.mean)
        return std[:, :-1], std[:, -1]

    def output_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact per-example output mean and variance, (M, N, O) each."""
        return full_covariance_output_moments(x, self.mean, self.scale_tril())
