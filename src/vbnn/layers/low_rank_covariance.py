"""FC low rank: a Gaussian over all weights and biases of a dense layer whose covariance is a
diagonal plus a rank-r term, for layers too large for a full factor.

As in ``full_covariance``, the D = (I + 1) O parameters are the rows of W~ = [W; b] in row-major
order. q(vec W~) = N(m, Sigma) with

    Sigma = diag(s) (I_D + B B^T) diag(s),    s = exp(l) > 0,  B of shape (D, r),

the low-rank analogue of FC's factor L = diag(s)(I + A): s holds each weight's
scale and B its correlations, so Adam's random walk of B's noisy entries changes variances by a
factor of the learned scales rather than by an absolute amount (see ``full_covariance``). Memory
and time per draw are O(D r) instead of O(D^2). A draw is m + s * (eps + B delta) with
eps ~ N(0, I_D), delta ~ N(0, I_r): one weight sample per model shared by all examples
(``exact_lrt = False``), like FC.

The KL to an isotropic Gaussian prior needs only (``core.gaussian.kl_to_isotropic_gaussian``)

    tr Sigma = sum_d s_d^2 (1 + sum_k B_dk^2),
    log det Sigma = 2 sum_d log s_d + log det(I_r + B^T B)   (matrix determinant lemma),

the last from a Cholesky factor of the r x r matrix, computed in float64. With B = 0 it is
mean-field; with r = D it can represent any covariance (take s small enough that
Sigma - diag(s^2) stays positive definite, and B a factor of the rest).
"""

from __future__ import annotations

from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ParameterRole, Prior
from vbnn.core.defaults import INIT_STD
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.full_covariance import JointGaussianLayer
from vbnn.layers.shell import Moments
from vbnn.priors.kl import CorrelatedGaussian, kl_divergence


def log_det_identity_plus_gram(factor: torch.Tensor) -> torch.Tensor:
    """log det(I_r + B^T B) for B (M, D, r), through a float64 Cholesky factor -> (M,)."""
    gram = factor.transpose(-1, -2).double() @ factor.double()
    gram = gram + torch.eye(factor.shape[-1], dtype=torch.float64, device=factor.device)
    cholesky = torch.linalg.cholesky(gram)
    log_det = 2.0 * torch.log(torch.diagonal(cholesky, dim1=-2, dim2=-1)).sum(-1)
    return log_det.to(factor.dtype)


class LowRankCovariance(JointGaussianLayer):
    """Dense layer with q(W, b) = N(m, diag(s)(I + B B^T) diag(s)); weight samples in LOCAL mode.

    The other arguments are those of ``MeanField``; ``kernel_size`` and ``bias=False`` are
    refused.

    Args:
        init_std: the marginal posterior std s of every parameter at initialisation (B starts
            at zero).
        rank: r, the number of columns of B (1 <= r <= D).
    """

    family_name = "fc-low-rank"
    roles = MappingProxyType(
        {"mean": ParameterRole.MEAN, "scale_factor": ParameterRole.CORRELATION}
    )

    # Parameters: the layer's shape, then the family's options, each a named parameter: the
    # registry reads a family's options from this signature (``FamilySpec.accepted_options``)
    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        init_std: float = INIT_STD,
        dtype: torch.dtype | None = None,
        rank: int = 10,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, init_std, dtype, **shell)
        if not 1 <= rank <= self.dim:
            raise ValueError(
                f"LowRankCovariance: rank must be in [1, D = (in + 1) out = {self.dim}], got {rank}"
            )
        self.rank = rank
        self.scale_factor = nn.Parameter(
            torch.zeros(self.num_models, self.dim, rank, dtype=self.mean.dtype)
        )

    def covariance(self) -> torch.Tensor:
        scale = self.scale_log_diagonal.exp()
        inner = self.scale_factor @ self.scale_factor.transpose(-1, -2)
        inner = inner + torch.eye(self.dim, dtype=inner.dtype, device=inner.device)
        return scale.unsqueeze(-1) * inner * scale.unsqueeze(-2)

    def _marginal_variance(self) -> torch.Tensor:
        """diag(Sigma) (M, D) = s^2 (1 + row norms of B squared)."""
        return self.scale_log_diagonal.mul(2.0).exp() * (1.0 + self.scale_factor.pow(2).sum(-1))

    def sample(self, noise: NoiseSource) -> Moments:
        draws = noise.randn(self.dim + self.rank, dtype=self.mean.dtype, device=self.mean.device)
        eps, delta = draws[:, : self.dim], draws[:, self.dim :]
        correlated = (self.scale_factor @ delta.unsqueeze(-1)).squeeze(-1)
        scaled = self.scale_log_diagonal.exp() * (eps + correlated)  # (M, D), or (B, D): B draws
        weight = self.mean + scaled.view(-1, *self.mean.shape[1:])
        return weight[:, :-1], weight[:, -1]

    def kl(self, prior: Prior) -> torch.Tensor:
        """KL(q || prior) from tr Sigma and log det Sigma (module docstring)."""
        trace = self._marginal_variance().sum(-1)
        log_det = 2.0 * self.scale_log_diagonal.sum(-1)
        log_det = log_det + log_det_identity_plus_gram(self.scale_factor)
        return kl_divergence(CorrelatedGaussian(self.mean.flatten(1), trace, log_det), prior)
