"""Models and training of the depth experiment (Farquhar et al. 2020, section 4 and appendix B).

* :func:`depth_widths` - the widest hidden width keeping a network under the parameter budget.
* the mean-field layer of Farquhar et al. 2020's pre-training is ``vbnn.layers.MeanField`` with
  ``parameterization="softplus"`` and ``init="he"``: sigma = softplus(rho), He-initialised means,
  sigma initialised to 1e-6 ("initial variance parameters, rho, which are transformed into
  standard deviations using the softplus ... with 1e-6").
* :func:`train_mean_field` - minibatch Adam through ``vbnn.train``: first the means with
  cross-entropy (Farquhar et al. 2020: "We pretrain the means using a cross-entropy loss to
  initialize the mean-field training": ``training.objectives.log_likelihood`` of the mean network
  with a Bernoulli likelihood, per example of the batch), then the full ELBO
  (``training.objectives.elbo``, same likelihood; KL not re-weighted, unit Gaussian prior, LRT),
  ``epochs`` each.
* :func:`point_network` - the point-weight network of an ``MLPArchitecture`` holding the trained
  means (its potential: ``MLPArchitecture.torch_potential``, or ``jax_potential`` for NumPyro).

The classifier has one logit output and a Bernoulli likelihood (binary cross-entropy), the
two-class softmax without its redundant output.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import torch

from vbnn.core.contracts import Activation, ForwardMode, ParameterRole
from vbnn.core.randomness import ModelGenerators
from vbnn.networks.mlp import MLP
from vbnn.priors.gaussian import GaussianPrior
from vbnn.references.architecture import MLPArchitecture
from vbnn.training.batches import TensorBatches
from vbnn.training.likelihoods import BernoulliLikelihood
from vbnn.training.optimizer import parameters_with_role
from vbnn.training.settings import TrainerConfig
from vbnn.training.trainer import train


def parameter_count(sizes: list[int]) -> int:
    """Weights plus biases of a dense network with layer widths ``sizes``."""
    return sum(i * o + o for i, o in pairwise(sizes))


def depth_widths(depth: int, budget: int = 1000, inputs: int = 2, outputs: int = 1) -> list[int]:
    """Layer widths (inputs, H x depth, outputs) with the largest H whose parameter count
    (weights and biases, all of which the sampler sees) is at most ``budget`` (Farquhar et al. 2020
    appendix B)."""
    if depth < 1:
        raise ValueError(f"depth_widths: depth must be >= 1, got {depth}")
    width = 1
    while parameter_count([inputs, *[width + 1] * depth, outputs]) <= budget:
        width += 1
    sizes = [inputs, *[width] * depth, outputs]
    if parameter_count(sizes) > budget:
        raise ValueError(f"depth_widths: no width fits {budget} parameters at depth {depth}")
    return sizes


@dataclass(frozen=True)
class PretrainConfig:
    """Farquhar et al. 2020 appendix B: Adam ("standard learning rates": 1e-3), batch 64, 10 epochs,
    N(0, 1) prior.

    ``mean_epochs`` of cross-entropy on the means come first (the paper gives no count for them).
    """

    epochs: int = 10
    mean_epochs: int = 10
    batch_size: int = 64
    learning_rate: float = 1e-3
    init_std: float = 1e-6
    prior_std: float = 1.0


def train_mean_field(
    architecture: MLPArchitecture,
    x: torch.Tensor,
    y: torch.Tensor,
    config: PretrainConfig,
    seed: int,
) -> MLP:
    """Means pre-trained with cross-entropy, then MFVI on the full ELBO; returns the MF network.

    Both phases train through ``vbnn.train`` on one ``TensorBatches`` source, so the second
    phase's data order continues the first's stream. The first trains only the means (the other
    parameters held fixed) on the batch mean of the cross-entropy (``TrainerConfig.batch_mean``).

    Args:
        x: (N, 2) inputs; y: (N,) labels in {0, 1}.
    """
    generators = ModelGenerators([seed])
    leaky = architecture.activation is Activation.LEAKY_RELU
    model = MLP(
        "mf",
        architecture.sizes,
        architecture.activation,
        generators,
        dtype=x.dtype,
        negative_slope=architecture.negative_slope if leaky else None,
        parameterization="softplus",
        init="he",
        init_std=config.init_std,
    )
    batches = TensorBatches(x, y, config.batch_size, torch.Generator().manual_seed(seed + 1))
    common = {
        "likelihood": BernoulliLikelihood(), "batch_size": config.batch_size,
        "learning_rate": config.learning_rate, "seed": seed, "progress": False,
        "noise": generators,
    }  # fmt: skip
    if config.mean_epochs:
        means = {id(p) for p in parameters_with_role(model, ParameterRole.MEAN)}
        fixed = [p for p in model.parameters() if id(p) not in means and p.requires_grad]
        try:
            for parameter in fixed:
                parameter.requires_grad_(False)
            train(model, batches, objective="likelihood", epochs=config.mean_epochs,
                  config=TrainerConfig(batch_mean=True, description="means"),
                  **common)  # fmt: skip
        finally:
            for parameter in fixed:
                parameter.requires_grad_(True)
    if config.epochs:
        train(model, batches, objective="elbo", prior=GaussianPrior(config.prior_std),
              epochs=config.epochs, config=TrainerConfig(description="mean field"),
              **common)  # fmt: skip
    return model


def point_network(mean_field: MLP, architecture: MLPArchitecture) -> MLP:
    """The architecture's point-weight network holding the mean-field network's means."""
    dtype = mean_field.layers[0].weight_mean.dtype
    network = architecture.torch_network(dtype)
    with torch.no_grad():
        for point, source in zip(network.layers, mean_field.layers, strict=True):
            point.weight.copy_(source.weight_mean)
            point.bias.copy_(source.bias_mean)
    return network


def mean_field_stds(mean_field: MLP) -> torch.Tensor:
    """The mean-field posterior stds, flattened in the point network's parameter order (D,)."""
    pieces = []
    for layer in mean_field.layers:
        weight_std, bias_std = layer.posterior_std()
        pieces += [weight_std.detach().reshape(-1), bias_std.detach().reshape(-1)]
    return torch.cat(pieces)


def accuracy(network: MLP, x: torch.Tensor, y: torch.Tensor) -> float:
    """Share of points whose logit has the sign of the label."""
    with torch.no_grad():
        logits = network(x.unsqueeze(0), ForwardMode.MEAN).reshape(-1)
    return float(((logits > 0).to(y.dtype) == y).to(torch.float64).mean())
