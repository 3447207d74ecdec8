"""Validation metrics of a network during training: the predictive NLL and accuracy or RMSE.

The predictive of K weight samples W_1 .. W_K (WEIGHTS mode, one draw per pass),

    NLL = -(1/N) sum_n log (1/K) sum_k p(y_n | x_n, W_k),

and for a categorical likelihood the accuracy of argmax_c (1/K) sum_k softmax(f_k(x_n))_c, for a
Gaussian one the RMSE of (1/K) sum_k f_k(x_n) (a heteroscedastic one: of its mean head mu_k, its
predictive the mixture (1/K) sum_k N(mu_k(x_n), sigma_k(x_n)^2)), both in the target's units.
A network without family layers, or one trained to a point estimate (MAP, maximum likelihood), is
evaluated by one pass of its mean network (K = 1). For labels per token (a sequence model,
``core.batch_rule``) an example is a sequence: its NLL sums over its tokens and its accuracy is the
share of its tokens predicted right. Every chunk of the data restarts the evaluation streams, so
every example sees the same K weight samples: the metrics do not depend on how the data is chunked
or ordered, nor on how it is shared out between the processes of a data-parallel run, which each
evaluate their shard and add up their sums (``reduce``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from vbnn.core.batch_rule import batch_rule, example_accuracy, example_log_prob, examples
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import as_input, network_output, stack_size
from vbnn.networks.predictive import predictive_probabilities
from vbnn.training.batches import Batches
from vbnn.training.likelihoods import REAL_TARGETS, CategoricalLikelihood, Likelihood


def shaped_targets(
    likelihood: Likelihood, y: torch.Tensor, models: int | None, stacked: bool
) -> torch.Tensor:
    """y as ``likelihood.log_prob`` takes it: a Gaussian's (homoscedastic or heteroscedastic)
    (B, 1) targets lose their trailing 1 and are repeated for every model of a stack; labels are
    shared as they are."""
    if not isinstance(likelihood, REAL_TARGETS):
        return y
    if not stacked and y.dim() == 2 and y.shape[-1] == 1:
        y = y.squeeze(-1)
    return y if models is None or stacked else y.expand(models, *y.shape)


@torch.no_grad()
def evaluate(
    network: nn.Module,
    likelihood: Likelihood,
    data: Batches,
    samples: int,
    seed: int,
    device: torch.device,
    reduce: Callable[[Sequence[float]], list[float]] | None = None,
) -> dict[str, float]:
    """ "validation_nll" and "validation_accuracy" (categorical) or "validation_rmse" (Gaussian)
    of ``network`` on ``data`` (module docstring); a stack's values are averaged over its models.

    Args:
        samples: K; 1 evaluates the mean network.
        reduce: adds up the sums (NLL, hits, squared errors, examples) of ``data`` over the
            processes of a data-parallel run, each holding its shard (None: one process).
    """
    models = stack_size(network)
    noise = ModelGenerators.for_keys(seed, range(models or 1), "eval", device)
    start = noise.get_state()
    mode = ForwardMode.WEIGHTS if samples > 1 else ForwardMode.MEAN
    rule, stacked = batch_rule(network), models is not None
    nll, hits, squares, count = 0.0, 0.0, 0.0, 0
    for x, y in data.in_order():
        noise.set_state(start)
        inputs = x if data.stacked else as_input(models, x)
        target = shaped_targets(likelihood, y, models, data.stacked)
        outputs = torch.stack(
            [network_output(network, inputs, mode, noise) for _ in range(samples)]
        )
        log_probs = torch.stack(
            [example_log_prob(likelihood, output, target, rule, stacked) for output in outputs]
        )
        predictive = torch.logsumexp(log_probs, 0) - math.log(samples)  # (..., B)
        nll -= float(predictive.sum()) / predictive[..., 0].numel()
        count += examples(target, stacked)
        if isinstance(likelihood, CategoricalLikelihood):
            probabilities = predictive_probabilities(outputs)
            right = example_accuracy(probabilities, target, rule, stacked)
            hits += float(right.sum()) / right[..., 0].numel()
        elif isinstance(likelihood, REAL_TARGETS):
            errors = likelihood.mean(outputs).mean(0) - target
            squares += float((errors**2).sum()) / errors[..., 0].numel()
    if reduce is not None:
        nll, hits, squares, count = reduce([nll, hits, squares, count])
    metrics = {"validation_nll": nll / count}
    if isinstance(likelihood, CategoricalLikelihood):
        metrics["validation_accuracy"] = hits / count
    elif isinstance(likelihood, REAL_TARGETS):
        metrics["validation_rmse"] = math.sqrt(squares / count)
    return metrics
