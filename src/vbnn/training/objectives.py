"""Training objectives as functions of a model stack, one value per model.

All return a dict of named (M,) terms whose key "objective" is the quantity to maximise; the other
entries name its parts, so a non-finite value can be traced to its source.
"""

from __future__ import annotations

import torch

from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.randomness import ModelGenerators
from vbnn.networks.mlp import MLP, GaussianLikelihood


def expected_log_likelihood(
    model: MLP,
    likelihood: GaussianLikelihood,
    x: torch.Tensor,
    y: torch.Tensor,
    generators: ModelGenerators,
    samples: int = 1,
) -> torch.Tensor:
    """Monte-Carlo E_q[ sum_n log p(y_n | x_n, W) ] with ``samples`` draws (LRT where it applies).

    Args:
        x: (M, N, I); y: (M, N).

    Returns:
        (M,) unbiased estimate of the expected log-likelihood of the whole set.
    """
    total = 0.0
    for _ in range(samples):
        prediction = model(x, ForwardMode.SAMPLE, generators)
        total = total + likelihood.log_prob(prediction, y).sum(-1)
    return total / samples


def elbo(
    model: MLP,
    likelihood: GaussianLikelihood,
    prior: Prior,
    x: torch.Tensor,
    y: torch.Tensor,
    generators: ModelGenerators,
    kl_weight: float = 1.0,
    samples: int = 1,
) -> dict[str, torch.Tensor]:
    """ELBO = E_q[log p(Y | X, W)] - kl_weight * KL(q || p), per model (kl_weight = 1: the ELBO)."""
    data = expected_log_likelihood(model, likelihood, x, y, generators, samples)
    kl = model.kl(prior)
    return {"objective": data - kl_weight * kl, "log-likelihood": data, "KL": kl}


def log_joint(
    model: MLP, likelihood: GaussianLikelihood, prior: Prior, x: torch.Tensor, y: torch.Tensor
) -> dict[str, torch.Tensor]:
    """MAP objective log p(Y | X, W) + log p(W) at point weights, per model."""
    data = likelihood.log_prob(model(x, ForwardMode.MEAN), y).sum(-1)
    log_prior = model.log_prior(prior)
    return {"objective": data + log_prior, "log-likelihood": data, "log-prior": log_prior}


def log_likelihood(
    model: MLP, likelihood: GaussianLikelihood, x: torch.Tensor, y: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Maximum-likelihood objective log p(Y | X, W), per model."""
    data = likelihood.log_prob(model(x, ForwardMode.MEAN), y).sum(-1)
    return {"objective": data, "log-likelihood": data}
