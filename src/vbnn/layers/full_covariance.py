"""FC: full-covariance Gaussian over all weights and biases of a dense layer.

The layer's D = (I + 1) O parameters are the rows of W~ = [W; b] (shape (I + 1, O)) read in
row-major order, index d = i O + o. q(vec W~) = N(m, L L^T) with L lower triangular and a
positive diagonal s = exp(l), parameterized as

    L = diag(s) U,    U = I + A unit lower triangular.

Row d of L is s_d times row d of U, so Var(w_d) = s_d^2 (1 + sum_j A_dj^2) and corr(w_d, w_e)
depends on A alone: A holds correlations, s holds scales. Why this form: Adam moves every
coordinate by about its learning rate whatever the size of its gradient, and the D (D - 1) / 2
entries of A get gradients that are almost pure Monte-Carlo noise, so they random-walk by ~lr per
step. Added to the diagonal (L = diag(s) + A) that walk would add an absolute ~lr^2 t D variance to
every weight, as wide as the prior within a few hundred steps on a layer of D ~ 700; here it
changes each weight's variance by a *factor* (1 + sum_j A_dj^2) of the learned scale s_d^2, which
the data term pins down. A is a ``ParameterRole.CORRELATION`` parameter, so it can get an Adam
rate of its own (``training.optimizer.learning_rate_groups``).

A gradient hook keeps A's upper part and diagonal at exactly zero (Adam never moves an entry whose
gradient is always zero), so no triangular mask is applied on the hot path. A draw is
m + L eps, eps ~ N(0, I_D): one weight sample per model shared by all examples, since a full
covariance admits no cheap local reparameterization (Trippe & Turner 2017, section 2,
names this as a likely cause of FC's weaker results). ``exact_lrt = False`` tells the shell so.
A convolution would need a factor over (C kh kw + 1) O parameters per layer; this family is dense
only and says so (``fc-low-rank`` is the variant for layers too large for a full factor).
"""

from __future__ import annotations

import math
from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ParameterRole, Prior
from vbnn.core.defaults import INIT_STD
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import Moments, VariationalLayer
from vbnn.priors.kl import CorrelatedGaussian, kl_divergence


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


class JointGaussianLayer(VariationalLayer):
    """Shared part of the dense families with one Gaussian over all of W~ = [W; b].

    Holds the means ``mean`` (M, I + 1, O) and the log scales ``scale_log_diagonal`` (M, D);
    a subclass adds its correlation parameters and states ``_marginal_variance`` (M, D),
    ``sample`` and ``kl``. Dense only, with a bias.
    """

    exact_lrt = False

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        init_std: float = INIT_STD,
        dtype: torch.dtype | None = None,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        name = type(self).__name__
        if self.operator.is_conv:
            raise ValueError(
                f"{name} is dense only: a convolution's factor over (C kh kw + 1) O "
                "parameters is not supported; use 'mf' or 'gd' for convolutions"
            )
        if not self.has_bias:
            raise ValueError(f"{name}: bias=False is not supported (the covariance covers b)")
        if not init_std > 0:
            raise ValueError(f"{name}: init_std must be > 0, got {init_std}")
        self.dim = (in_features + 1) * out_features
        weight = self.initial_mean(dtype)
        self.mean = nn.Parameter(
            torch.cat([weight, self.zeros_bias(weight.dtype).unsqueeze(1)], dim=1)
        )
        self.scale_log_diagonal = nn.Parameter(
            torch.full((self.num_models, self.dim), math.log(init_std), dtype=weight.dtype)
        )

    def _marginal_variance(self) -> torch.Tensor:
        """diag(Sigma) (M, D)."""
        raise NotImplementedError

    def covariance(self) -> torch.Tensor:
        """Sigma (M, D, D) in the row-major layout of W~, for tests and diagnostics."""
        raise NotImplementedError

    def means(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean[:, :-1], self.mean[:, -1]

    def weight_moments(self) -> Moments:
        return self.mean[:, :-1], self._marginal_variance().view_as(self.mean)[:, :-1]

    def bias_moments(self) -> Moments:
        return self.mean[:, -1], self._marginal_variance().view_as(self.mean)[:, -1]

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

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        std = self._marginal_variance().sqrt().view_as(self.mean)
        return std[:, :-1], std[:, -1]


class FullCovariance(JointGaussianLayer):
    """Dense layer with a full-covariance Gaussian over (W, b); weight samples in LOCAL mode.

    The other arguments are those of ``MeanField``; ``kernel_size`` and ``bias=False`` are
    refused.

    Args:
        init_std: the marginal posterior std s of every parameter at initialisation (A starts
            at zero).
    """

    family_name = "fc"
    roles = MappingProxyType({"mean": ParameterRole.MEAN, "scale_lower": ParameterRole.CORRELATION})

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        init_std: float = INIT_STD,
        dtype: torch.dtype | None = None,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, init_std, dtype, **shell)
        self.scale_lower = nn.Parameter(
            torch.zeros(self.num_models, self.dim, self.dim, dtype=self.mean.dtype)
        )
        self.scale_lower.register_hook(_strictly_lower)

    def scale_tril(self) -> torch.Tensor:
        """The Cholesky factor L (M, D, D)."""
        scale = self.scale_log_diagonal.exp()
        lower = scale.unsqueeze(-1) * torch.tril(self.scale_lower, -1)
        return lower + torch.diag_embed(scale)

    def covariance(self) -> torch.Tensor:
        factor = self.scale_tril()
        return factor @ factor.transpose(-1, -2)

    def scale_noise(self, eps: torch.Tensor) -> torch.Tensor:
        """L eps for eps (M, D) -> (M, D)."""
        lower = (self.scale_lower @ eps.unsqueeze(-1)).squeeze(-1)
        return self.scale_log_diagonal.exp() * (eps + lower)

    def _marginal_variance(self) -> torch.Tensor:
        """diag(L L^T) (M, D) without forming L: the row norms of A and the scales."""
        off_diagonal = self.scale_lower.pow(2).sum(-1)  # A is zero on and above the diagonal
        return self.scale_log_diagonal.mul(2.0).exp() * (1.0 + off_diagonal)

    def sample(self, noise: NoiseSource) -> Moments:
        eps = noise.randn(self.dim, dtype=self.mean.dtype, device=self.mean.device)
        # (M, D) noise, or (B, D) for one model's B draws (``layers.sequence_weights``)
        weight = self.mean + self.scale_noise(eps).view(-1, *self.mean.shape[1:])
        return weight[:, :-1], weight[:, -1]

    def kl(self, prior: Prior) -> torch.Tensor:
        """KL(q || prior): tr(L L^T) = sum of the marginal variances, log det = 2 sum_d l_d."""
        trace = self._marginal_variance().sum(-1)
        log_det = 2.0 * self.scale_log_diagonal.sum(-1)
        return kl_divergence(CorrelatedGaussian(self.mean.flatten(1), trace, log_det), prior)

    def output_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact per-example output mean and variance, (M, N, O) each."""
        return full_covariance_output_moments(x, self.mean, self.scale_tril())
