"""Training objectives: pure functions of a network, a likelihood, a prior and a batch.

Each returns a dict of named terms whose key "objective" is the quantity to maximise; the other
entries name its parts, so a non-finite value can be traced to its source. Terms have one value
per model, (M,), for a stack and scalars for one network.

The ELBO of a batch B drawn from a data set of N examples (N = B for full-batch training):

    ELBO = N / B * sum_{n in B} E_q[log p(y_n | x_n, W)] - kl_weight * KL(q || p),

with the expectation a Monte-Carlo average over ``samples`` draws (the LRT where it is exact).
``kl_weight`` = 1 gives the ELBO (Trippe & Turner 2017, eq. 1; Neklyudov et al. 2019, eq. 5). The
network is anything the shell's ``network_output`` runs: ``MLP``, ``LeNet5``, a family layer, or a
user ``nn.Module`` holding family layers (``nn.Sequential`` included).
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.randomness import NoiseSource
from vbnn.layers.modes import stack_size, takes_mode, use_mode, use_noise, variational_layers
from vbnn.training.likelihoods import Likelihood

Terms = dict[str, torch.Tensor]


def network_output(
    model: nn.Module, x: torch.Tensor, mode: ForwardMode | str, noise: NoiseSource | None = None
) -> torch.Tensor:
    """``model``'s output for ``x`` with every family layer in ``mode``, drawing from ``noise``.

    Modules that take ``(x, mode, generators)`` (``layers.modes.takes_mode``) get them; any other
    is called as ``model(x)`` inside ``use_mode`` and ``use_noise`` (``noise`` None: its layers
    draw from their own generator or torch's global RNG).
    """
    if takes_mode(model):
        return model(x, mode, noise)
    with use_mode(model, mode), use_noise(model, noise):
        return model(x)


def kl_divergence(model: nn.Module, prior: Prior | None = None) -> torch.Tensor:
    """KL(q || prior) summed over the family layers of ``model``: (M,) for a stack, a scalar for
    one network.

    ``prior`` None gives every layer its family's ``default_prior`` (N(0, 1) for the Gaussian
    families, log-uniform for variational dropout and the variance layers); layers without a KL
    term (point weights, binary dropout) add nothing.
    """
    if prior is not None and hasattr(model, "kl"):
        total = model.kl(prior)
    else:
        layers = [layer for layer in variational_layers(model) if layer.has_kl]
        if not layers:
            raise ValueError(f"{type(model).__name__} holds no vbnn family layer with a KL term")
        total = sum(layer.kl(layer.default_prior if prior is None else prior) for layer in layers)
    return total.squeeze(0) if stack_size(model) is None else total


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
        Unbiased estimate for the examples of the batch: (M,) for a stack, a scalar for one
        network.
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
    prior: Prior | None,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: NoiseSource | None = None,
    kl_weight: float = 1.0,
    samples: int = 1,
    dataset_size: int | None = None,
) -> Terms:
    """ELBO terms of a batch (module docstring); ``dataset_size`` None: the batch is the data;
    ``prior`` None: each layer's family default (``kl_divergence``)."""
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
