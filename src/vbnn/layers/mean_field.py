"""MF: factorised Gaussian over weights and biases with learned variances (Blundell et al. 2015).

q(W_ij) = N(mu_ij, sigma_ij^2), sigma_ij = exp(rho_ij): the standard deviation is stored as its
logarithm, so the KL's log sigma term is exact and Adam moves it on a relative scale (the paper,
000_e87e55bc25ea4726.txt appendix A, initialises sigma to 1e-4, i.e. rho = log 1e-4).
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.kernels import local_reparameterization_sample
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.base import affine, initial_means, require_generators


class MeanFieldLinear(nn.Module):
    """Dense layer with q(W, b) = prod N(mu, sigma^2); LRT in SAMPLE mode.

    Args:
        in_features, out_features: I and O.
        generators: one generator per model, used for the initial means.
        posterior_std: initial sigma of every weight and bias.
        dtype: parameter dtype.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators,
        posterior_std: float | torch.Tensor = 1e-4,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.num_models = len(generators)
        weight, bias = initial_means(generators, in_features, out_features, dtype)
        self.weight_mean = nn.Parameter(weight)
        self.bias_mean = nn.Parameter(bias)
        log_std = torch.log(torch.as_tensor(posterior_std, dtype=dtype)).expand(self.num_models)
        self.weight_log_std = nn.Parameter(log_std.view(-1, 1, 1).expand_as(weight).clone())
        self.bias_log_std = nn.Parameter(log_std.view(-1, 1).expand_as(bias).clone())

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode = ForwardMode.SAMPLE,
        generators: ModelGenerators | None = None,
    ) -> torch.Tensor:
        if mode is ForwardMode.MEAN:
            return affine(x, self.weight_mean, self.bias_mean)
        generators = require_generators(generators, mode)
        if mode is ForwardMode.WEIGHTS:
            eps_w = generators.randn(self.in_features + 1, self.out_features, dtype=x.dtype)
            weight = self.weight_mean + self.weight_log_std.exp() * eps_w[:, :-1]
            bias = self.bias_mean + self.bias_log_std.exp() * eps_w[:, -1]
            return affine(x, weight, bias)
        noise = generators.randn(x.shape[1], self.out_features, dtype=x.dtype)
        return local_reparameterization_sample(
            x, self.weight_mean, self.weight_log_std, self.bias_mean, self.bias_log_std, noise
        )

    def kl(self, prior: Prior) -> torch.Tensor:
        return prior.kl_diagonal(self.weight_mean, self.weight_log_std.exp()) + prior.kl_diagonal(
            self.bias_mean, self.bias_log_std.exp()
        )

    def posterior_mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_mean, self.bias_mean

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_log_std.exp(), self.bias_log_std.exp()
