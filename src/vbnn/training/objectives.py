"""Training objectives: pure functions of a network, a likelihood, a prior and a batch.

Each objective returns a dict of named terms whose key "objective" is the quantity to maximise;
the other entries name its parts, so a non-finite value can be traced to its source. Terms have
one value per model, (M,), for a stack and scalars for one network.

The ELBO of a batch B drawn from a data set of N examples (N = B for full-batch training):

    ELBO = N / B * sum_{n in B} E_q[log p(y_n | x_n, W)] - kl_weight * KL(q || p),

with the expectation a Monte-Carlo average over ``samples`` draws (LOCAL mode: the LRT where it
is exact). ``kl_weight`` = 1 gives the ELBO (Trippe & Turner 2017, eq. 1; Neklyudov et al. 2019,
eq. 5). The MAP objective is the log joint log p(Y | X, W) + log p(W) of the mean network, the
maximum-likelihood objective its first term.

Every function here works on any module: ``MLP``, ``LeNet5``, a family layer, or a user
``nn.Module`` holding family layers (``nn.Sequential``, a ``vbnn.convert``ed model). The KL and
the log prior are sums over ``variational_layers(model)``; layers without a KL term (point
weights, binary dropout) contribute 0, so a point or dropout model trains under the same ELBO.
Each checks that the batch's inputs are finite (``likelihoods.checking``: not inside a compiled
graph), naming the first NaN or inf ("x[5, 2] is nan"); the likelihoods check the targets.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

import torch
from torch import nn

from vbnn.core.batch_rule import Inputs, batch_rule, example_log_prob, examples
from vbnn.core.contracts import ForwardMode, Prior
from vbnn.core.randomness import NoiseSource
from vbnn.layers.modes import network_output, stack_size, variational_layers
from vbnn.layers.shell import VariationalLayer
from vbnn.training.likelihoods import Likelihood, check_finite

Terms = dict[str, torch.Tensor]


def _family_layers(model: nn.Module, caller: str) -> list[VariationalLayer]:
    layers = variational_layers(model)
    if not layers:
        raise ValueError(f"{caller}: {type(model).__name__} holds no vbnn family layer")
    return layers


def _per_network(model: nn.Module, total: torch.Tensor) -> torch.Tensor:
    """(M,) for a stack; the scalar of model 0 for one network."""
    return total.squeeze(0) if stack_size(model) is None else total


def kl(model: nn.Module, prior: Prior | None = None) -> torch.Tensor:
    """KL(q || prior) = sum over the family layers of ``model`` of their KL: (M,) for a stack, a
    scalar for one network.

    ``prior`` None gives every layer its family's ``default_prior`` (N(0, 1) for the Gaussian
    families, log-uniform for variational dropout and the variance layers). Layers without a KL
    term (``has_kl = False``: point weights, binary dropout) contribute 0; a model made only of
    them has KL 0 (zeros of its parameters' dtype and device).

    Raises:
        ValueError: ``model`` holds no family layer.
    """
    layers = _family_layers(model, "kl")
    terms = [
        layer.kl(layer.default_prior if prior is None else prior)
        for layer in layers
        if layer.has_kl
    ]
    if terms:
        total = sum(terms)
    else:
        parameter = next(layers[0].parameters())
        total = parameter.new_zeros(layers[0].num_models)
    return _per_network(model, total)


def log_prior(model: nn.Module, prior: Prior | None = None) -> torch.Tensor:
    """log p(W) = sum over the family layers of ``model`` of log p(weight) + log p(bias), at the
    posterior means: (M,) for a stack, a scalar for one network.

    For point weights (the ``point`` family) this is the log prior of the weights; for any other
    family it is the log prior of the mean network, the weights MEAN mode uses (for example the
    MAP estimate of a converted ``mf`` model is a MAP estimate of its means; its variances get no
    gradient). ``prior`` None gives every layer its family's ``default_prior``. The value is the
    prior's ``log_prob``: normalised for ``GaussianPrior`` and ``StudentTPrior``; -log|w| for the
    improper ``LogUniformPrior`` (up to its infinite constant: unbounded above as a weight goes
    to 0, +inf at an exact 0 such as a fresh layer's zero bias, so it has no MAP estimate);
    ``ARDPrior``, whose variance the posterior sets, has no fixed density and raises TypeError.

    Raises:
        ValueError: ``model`` holds no family layer.
        TypeError: the prior has no density (``ARDPrior``).
    """
    layers = _family_layers(model, "log_prior")
    total = sum(
        layer.log_prior(layer.default_prior if prior is None else prior) for layer in layers
    )
    return _per_network(model, total)


def _summed_log_likelihood(
    model: nn.Module,
    likelihood: Likelihood,
    x: Inputs,
    y: torch.Tensor,
    forward_mode: ForwardMode,
    noise: NoiseSource | None = None,
    samples: int = 1,
) -> torch.Tensor:
    """The average over ``samples`` forward passes in ``forward_mode`` of sum_n log p(y_n | x_n, W),
    after checking that the inputs ``x`` are finite (one reduction; off in a compiled graph).

    Every objective reaches the data through here, so a NaN or inf in a batch's inputs is named
    with its position ("x[5, 2] is nan") instead of surfacing later as a non-finite objective.
    A mapping of inputs and labels per token follow the model's batch rule
    (``core.batch_rule``: a sequence is an example, its log-likelihood summed over its tokens).
    """
    for name, values in x.items() if isinstance(x, Mapping) else [("x", x)]:
        check_finite(name, values, "the network's inputs")
    rule, stacked = batch_rule(model), stack_size(model) is not None
    total = 0.0
    for _ in range(samples):
        prediction = network_output(model, x, forward_mode, noise)
        total = total + example_log_prob(likelihood, prediction, y, rule, stacked).sum(-1)
    return total / samples


def _dataset_scale(
    model: nn.Module, y: torch.Tensor, dataset_size: int | None, caller: str
) -> float | None:
    """N / B, the factor that makes a batch's summed log-likelihood an unbiased estimate of that
    of the N = ``dataset_size`` examples (B: y's last dimension, or its sequences for labels per
    token, ``core.batch_rule.examples``); None when ``dataset_size`` is None (the batch is the
    data). Checked before any forward pass.

    Raises:
        ValueError: ``dataset_size`` not a positive integer, or below the batch's B examples
            (a batch cannot hold more examples than the data set it is drawn from).
    """
    if dataset_size is None:
        return None
    batch = examples(y, stack_size(model) is not None)
    try:
        size = operator.index(dataset_size)  # int, numpy integer; not a float or a bool
    except TypeError:
        size = None
    if size is None or isinstance(dataset_size, bool) or size < 1:
        raise ValueError(
            f"{caller}: dataset_size must be a positive integer (N, the examples in the training "
            f"set), got {dataset_size!r}"
        )
    if size < batch:
        raise ValueError(
            f"{caller}: dataset_size={size} is below the batch size {batch} (y's last "
            "dimension); it must be N, the number of examples in the whole training set"
        )
    return size / batch


def expected_log_likelihood(
    model: nn.Module,
    likelihood: Likelihood,
    x: Inputs,
    y: torch.Tensor,
    noise: NoiseSource | None = None,
    samples: int = 1,
) -> torch.Tensor:
    """Monte-Carlo E_q[ sum_n log p(y_n | x_n, W) ] over the batch with ``samples`` draws, each
    layer drawing with its training estimator (``ForwardMode.TRAINING``).

    Returns:
        Unbiased estimate for the examples of the batch: (M,) for a stack, a scalar for one
        network.

    Raises:
        ValueError: ``samples`` < 1, or a NaN or inf in ``x`` (its first position named).
    """
    if samples < 1:
        raise ValueError(f"expected_log_likelihood: samples must be >= 1, got {samples}")
    return _summed_log_likelihood(model, likelihood, x, y, ForwardMode.TRAINING, noise, samples)


def elbo(
    model: nn.Module,
    likelihood: Likelihood,
    prior: Prior | None,
    x: Inputs,
    y: torch.Tensor,
    noise: NoiseSource | None = None,
    kl_weight: float = 1.0,
    samples: int = 1,
    dataset_size: int | None = None,
) -> Terms:
    """ELBO terms of a batch (module docstring); ``dataset_size`` None: the batch is the data;
    ``prior`` None: each layer's family default (``kl``). The parameters are the terms of the
    module docstring's formula (model, likelihood, prior, batch) and how it is drawn, each with
    its default, as ``log_joint`` and ``log_likelihood`` take theirs.

    Raises:
        ValueError: ``dataset_size`` not a positive integer or below the batch size, before any
            forward pass.
    """
    scale = _dataset_scale(model, y, dataset_size, "elbo")
    data = expected_log_likelihood(model, likelihood, x, y, noise, samples)
    if scale is not None:
        data = data * scale
    divergence = kl(model, prior)
    return {"objective": data - kl_weight * divergence, "log-likelihood": data, "KL": divergence}


def log_joint(
    model: nn.Module,
    likelihood: Likelihood,
    prior: Prior,
    x: Inputs,
    y: torch.Tensor,
    dataset_size: int | None = None,
) -> Terms:
    """MAP objective log p(Y | X, W) + log p(W) of the mean network (``log_prior``), per model.

    ``dataset_size`` N: the batch's log-likelihood is scaled by N / B, an unbiased estimate of
    that of the N examples (as in ``elbo``); None: the batch is the data.

    Raises:
        ValueError: ``dataset_size`` not a positive integer or below the batch size.
    """
    scale = _dataset_scale(model, y, dataset_size, "log_joint")
    data = _summed_log_likelihood(model, likelihood, x, y, ForwardMode.MEAN)
    if scale is not None:
        data = data * scale
    prior_term = log_prior(model, prior)
    return {"objective": data + prior_term, "log-likelihood": data, "log-prior": prior_term}


def log_likelihood(model: nn.Module, likelihood: Likelihood, x: Inputs, y: torch.Tensor) -> Terms:
    """Maximum-likelihood objective log p(Y | X, W) of the mean network, per model."""
    data = _summed_log_likelihood(model, likelihood, x, y, ForwardMode.MEAN)
    return {"objective": data, "log-likelihood": data}
