"""Variance of a stochastic ELBO gradient w.r.t. the weight means, split by its two sources.

A training step minimises L(b, e) = CE(f(x_b; W(e)), y_b) + KL / N on a minibatch b with noise e
(for the LRT, e is one standard normal per example and output; for one weight draw per step, one
per weight; for Flipout, one per weight plus random signs per example and unit). The gradient
g = dL/dmu w.r.t. the weight means mu of a layer (P values) is an unbiased estimate of the
gradient of the ELBO / N, and its variance decides how far Adam gets per step. Two variances are
measured with R draws each:

* noise: the same minibatch, R independent noise draws, Var_e[g | b] (zero for point weights);
* minibatch: R different minibatches, each with fresh noise, Var_{b, e}[g] (what training sees).

Per layer we report the total variance tr Cov[g] = sum_p Var[g_p] (unbiased over the R draws) and
the relative variance tr Cov[g] / ||E g||^2 (the mean gradient estimated from the same draws), a
ratio of sums rather than a mean of per-weight ratios, which near-zero mean gradients would make
unstable. A relative variance of v means that averaging v minibatches' gradients brings the
noise down to the size of the signal (Kingma, Salimans & Welling 2015 compare estimators by this
variance; the LRT's per-example noise lowers it relative to one shared weight draw, their
section 3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

# names a weight-mean parameter has in vbnn's mf layers, bayesian-torch's layers and torch's own
WEIGHT_MEAN_NAMES = ("weight_mean", "mu_weight", "mu_kernel")
WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def weight_means(model: nn.Module) -> dict[str, nn.Parameter]:
    """The weight-mean parameter of every weight layer of ``model`` by module path: a
    variational layer's mean (vbnn or bayesian-torch), or a plain layer's ``weight``.

    Raises:
        ValueError: ``model`` has no weight layer.
    """
    found: dict[str, nn.Parameter] = {}
    for path, module in model.named_modules():
        for name in WEIGHT_MEAN_NAMES:
            value = getattr(module, name, None)
            if isinstance(value, nn.Parameter):
                found[path] = value
                break
        else:
            if isinstance(module, WEIGHT_LAYERS):
                found[path] = module.weight
    if not found:
        raise ValueError(f"weight_means: {type(model).__name__} has no weight layer")
    return found


def _gradients(
    loss: Callable[[int], torch.Tensor], batches: Sequence[int], means: dict[str, nn.Parameter]
) -> dict[str, torch.Tensor]:
    """(R, P) flattened gradients per layer, one row per call ``loss(batch)``."""
    rows: dict[str, list[torch.Tensor]] = {path: [] for path in means}
    parameters = list(means.values())
    for batch in batches:
        grads = torch.autograd.grad(loss(batch), parameters)
        for path, grad in zip(means, grads, strict=True):
            rows[path].append(grad.detach().flatten().double())
    return {path: torch.stack(values) for path, values in rows.items()}


def _summary(gradients: torch.Tensor) -> tuple[float, float]:
    """(tr Cov, ||mean||^2) of (R, P) gradient draws; the covariance unbiased (R - 1)."""
    variance = gradients.var(dim=0, correction=1).sum().item()
    return variance, gradients.mean(dim=0).square().sum().item()


def gradient_variance(
    model: nn.Module,
    loss: Callable[[int], torch.Tensor],
    batch_count: int,
    draws: int,
    generator: torch.Generator,
) -> dict[str, dict[str, float]]:
    """Noise and minibatch variance of the gradient of ``loss`` w.r.t. the weight means.

    Args:
        model: the network at the point of measurement (train mode; left unchanged).
        loss: ``loss(batch_index)`` -> the scalar training loss of minibatch ``batch_index``
            with a fresh noise draw (the arm's own estimator).
        batch_count: how many minibatches there are to choose from.
        draws: R >= 2, draws per variance.
        generator: picks the minibatches (the noise comes from the arm's own sources).

    Returns:
        per layer path and "total" (all layers): ``noise_variance``, ``noise_relative``,
        ``minibatch_variance``, ``minibatch_relative``, ``squared_mean`` and ``parameters``.

    Raises:
        ValueError: ``draws`` < 2 or a non-finite gradient (naming the layer).
    """
    if draws < 2:
        raise ValueError(f"gradient_variance: draws must be >= 2, got {draws}")
    means = weight_means(model)
    fixed = int(torch.randint(batch_count, (1,), generator=generator))
    varied = torch.randint(batch_count, (draws,), generator=generator).tolist()
    noise = _gradients(loss, [fixed] * draws, means)
    minibatch = _gradients(loss, varied, means)
    for path, rows in minibatch.items():
        if not (torch.isfinite(rows).all() and torch.isfinite(noise[path]).all()):
            raise ValueError(f"gradient_variance: non-finite gradient in layer {path!r}")
    noise["total"] = torch.cat(list(noise.values()), dim=1)
    minibatch["total"] = torch.cat(list(minibatch.values()), dim=1)
    out = {}
    for path in minibatch:
        noise_variance, _ = _summary(noise[path])
        minibatch_variance, squared_mean = _summary(minibatch[path])
        out[path] = {
            "parameters": minibatch[path].shape[1],
            "squared_mean": squared_mean,
            "noise_variance": noise_variance,
            "noise_relative": noise_variance / squared_mean,
            "minibatch_variance": minibatch_variance,
            "minibatch_relative": minibatch_variance / squared_mean,
        }
    return out
