"""Training objectives: pure functions of a network, a likelihood, a prior and a batch.

Each returns a dict of named terms whose key "objective" is the quantity to maximise; the other
entries name its parts, so a non-finite value can be traced to its source. Terms have one value
per model, (M,), for a stack and (1,) for one network.

The ELBO of a batch B drawn from a data set of N examples (N = B for full-batch training):

    ELBO = N / B * sum_{n in B} E_q[log p(y_n | x_n, W)] - kl_weight * KL(q || p),

with the expectation a Monte-Carlo average over ``samples`` draws (the LRT where it is exact).
``kl_weight`` = 1 gives the ELBO (000, eq. 1; 003, eq. 5). The network is anything the shell's
``network_output`` runs: ``MLP``, ``LeNet5``, a family layer, or a user ``nn.Module`` holding
family layers (``nn.Sequential`` included).
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.randomness import NoiseSource
from vbnn.layers.shell import VariationalLayer, use_mode, variational_layers
from vbnn.training.likelihoods import Likelihood

Terms = dict[str, torch.Tensor]


def network_output(
    model: nn.Module, x: torch.Tensor, mode: ForwardMode | str, noise: NoiseSource | None = None
) -> torch.Tensor:
    """``model``'s output for ``x`` with every family layer in ``mode``.

    Networks of this package (and family layers) take ``(x, mode, generators)``; any other module
    is called as ``model(x)`` inside ``use_mode``, its layers drawing from their own generators.
    """
    if isinstance(model, VariationalLayer) or getattr(model, "takes_mode", False):
        return model(x, mode, noise)
    if noise is not None:
        raise TypeError(
            f"{type(model).__name__} takes no noise source: its family layers draw from their "
            "own `generator` (or torch's global RNG); pass noise=None"
        )
    with use_mode(model, mode):
        return model(x)


def kl_divergence(model: nn.Module, prior: Prior) -> torch.Tensor:
    """KL(q || prior) summed over the family layers of ``model``: (M,), or (1,) for one network."""
    if hasattr(model, "kl"):
        return model.kl(prior)
    layers = variational_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} holds no vbnn family layer: no KL to compute")
    return sum(layer.kl(prior) for layer in layers)


def expected_log_likelihood(
    model: nn.Module,
    likelihood: Likelihood,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: NoiseSource | None = None,
    samples: int = 1,
) -> torch.Tensor:
    """Monte-Carlo E_q[ sum_n log p(y_n | x_n, W) ] over the batch with ``samples`` draws.

    Returns:
        (M,) (or (N,)-summed scalar per model) unbiased estimate for the examples of the batch.
    """
    if samples < 1:
        raise ValueError(f"expected_log_likelihood: samples must be >= 1, got {samples}")
    total = 0.0
    for _ in range(samples):
        prediction = network_output(model, x, ForwardMode.SAMPLE, noise)
        total = total + likelihood.log_prob(prediction, y).sum(-1)
    return total / samples


def elbo(
    model: nn.Module,
    likelihood: Likelihood,
    prior: Prior,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: NoiseSource | None = None,
    kl_weight: float = 1.0,
    samples: int = 1,
    dataset_size: int | None = None,
) -> Terms:
    """ELBO terms of a batch (module docstring); ``dataset_size`` None: the batch is the data."""
    data = expected_log_likelihood(model, likelihood, x, y, noise, samples)
    if dataset_size is not None:
        data = data * (dataset_size / y.shape[-1])
    kl = kl_divergence(model, prior)
    return {"objective": data - kl_weight * kl, "log-likelihood": data, "KL": kl}


def log_joint(
    model: nn.Module, likelihood: Likelihood, prior: Prior, x: torch.Tensor, y: torch.Tensor
) -> Terms:
    """MAP objective log p(Y | X, W) + log p(W) at point weights, per model."""
    data = likelihood.log_prob(network_output(model, x, ForwardMode.MEAN), y).sum(-1)
    log_prior = model.log_prior(prior)
    return {"objective": data + log_prior, "log-likelihood": data, "log-prior": log_prior}


def log_likelihood(
    model: nn.Module, likelihood: Likelihood, x: torch.Tensor, y: torch.Tensor
) -> Terms:
    """Maximum-likelihood objective log p(Y | X, W) of the mean network, per model."""
    data = likelihood.log_prob(network_output(model, x, ForwardMode.MEAN), y).sum(-1)
    return {"objective": data, "log-likelihood": data}
