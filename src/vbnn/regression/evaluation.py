"""Predictive evaluation of a model stack: test log-likelihood by Monte Carlo (the Gaussian mixture
of the K predictive samples, ``metrics.gaussian_mixture_log_likelihood``) and RMSE of the
predictive mean."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.metrics import gaussian_mixture_log_likelihood
from vbnn.networks.mlp import MLP
from vbnn.networks.predictive import sample
from vbnn.training.likelihoods import GaussianLikelihood


@dataclass(frozen=True)
class PredictiveMetrics:
    """Per-model metrics in the target's original units: each a (M,) tensor."""

    log_likelihood: torch.Tensor
    rmse: torch.Tensor


@torch.no_grad()
# Parameters: the trained stack, the standardised test data and its scale, then how to predict
def evaluate(
    model: MLP,
    likelihood: GaussianLikelihood,
    x: torch.Tensor,
    y: torch.Tensor,
    target_scale: torch.Tensor,
    noise: ModelGenerators | None,
    samples: int = 100,
    stochastic: bool = True,
) -> PredictiveMetrics:
    """Test log-likelihood and RMSE with K = ``samples`` predictive draws.

    Inputs and targets are standardised; ``target_scale`` (M,) is the training target's std, so
    log-likelihoods shift by -log(scale) and RMSEs multiply by it (original units).
    A deterministic model (``stochastic=False``) uses one forward pass of the means.
    """
    if stochastic:
        predictions = sample(model, x, samples, ForwardMode.LOCAL, noise=noise).squeeze(-1)
    else:
        predictions = model(x, ForwardMode.MEAN).squeeze(-1).unsqueeze(0)
    return metrics_from_predictions(predictions, likelihood.std(), y, target_scale)


def metrics_from_predictions(
    predictions: torch.Tensor, noise_std: torch.Tensor, y: torch.Tensor, target_scale: torch.Tensor
) -> PredictiveMetrics:
    """Metrics in original units from K predictions (K, M, N) in standardised units.

    Args:
        predictions: (K, M, N) network outputs.
        noise_std: (M,) or (K, M) standardised noise stds.
        y: (M, N) standardised targets.
        target_scale: (M,) the training targets' std.
    """
    stds = noise_std.expand(predictions.shape[:2])  # (K, M): the std of every prediction
    per_example = torch.stack(
        [
            gaussian_mixture_log_likelihood(predictions[:, m], stds[:, m, None], y[m])
            for m in range(predictions.shape[1])
        ]
    )
    log_likelihood = per_example.mean(-1) - torch.log(target_scale)
    rmse = ((predictions.mean(0) - y) ** 2).mean(-1).sqrt() * target_scale
    return PredictiveMetrics(log_likelihood=log_likelihood, rmse=rmse)
