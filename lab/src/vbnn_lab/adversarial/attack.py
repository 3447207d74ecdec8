"""Targeted iterative fast gradient sign attacks on (ensembles of) stochastic classifiers.

Neklyudov et al. 2019 section 6.3 and Neklyudov et al. 2018 section 6.3 (Goodfellow et al.
2015): for a target class t != the true class, iterate with a fixed step epsilon

    x_{s+1} = clip_[0, 1]( x_s - epsilon * sign( grad_x L(x_s) ) ),   L(x) = -log pbar(t | x),

where pbar is the predictive distribution the model reports:

    pbar(c | x) = 1 / (K M) sum_{k=1}^K sum_{m=1}^M softmax(f_m(x, W_mk))_c,

the average over the M members of a stack (deep ensembles) and K weight (or dropout mask) draws
W_mk ~ q_m, one draw per member and pass shared by the examples (``ForwardMode.WEIGHTS``); K = 1
with the weight means (``ForwardMode.MEAN``) for deterministic networks. The gradient is that of
the ensemble-averaged predictive (the attacker sees the model as it predicts), with fresh draws at
every step. After each step the attack is judged on an independent set of K draws: an image counts
as a success when arg max_c pbar(c | x_s) = t; the mean predictive entropy
H = -sum_c pbar_c log pbar_c is reported beside it (Neklyudov et al. 2018 Fig. 2b).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.modes import as_input, network_output, stack_size
from vbnn.metrics import entropy


@dataclass(frozen=True)
class AttackConfig:
    """Step epsilon (in units of the [0, 1] pixel range), iterations, and the seed of the
    targets and of the weight draws."""

    step: float = 0.01
    iterations: int = 50
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.step > 0 or self.iterations < 1:
            raise ValueError(f"AttackConfig: step {self.step} must be > 0 and iterations >= 1")


@dataclass(frozen=True)
class Prediction:
    """How a model reports pbar: its forward ``mode`` and the number of passes K (``samples``)
    averaged."""

    mode: ForwardMode
    samples: int = 1


@dataclass(frozen=True)
class AttackTrace:
    """Per iteration s = 0 .. S: share of images classified as their target, mean entropy."""

    success_rate: np.ndarray
    mean_entropy: np.ndarray


def predictive(
    model: nn.Module, x: torch.Tensor, prediction: Prediction, noise: NoiseSource | None
) -> torch.Tensor:
    """pbar (N, C) of images ``x`` (N, ...), averaged over the stack and the K passes of
    ``prediction`` (differentiable in ``x``)."""
    inputs = as_input(model, x)
    total = 0.0
    # not ``vbnn.sample``: the attack differentiates this average in x, and sample runs no_grad
    for _ in range(prediction.samples):
        probabilities = torch.softmax(network_output(model, inputs, prediction.mode, noise), -1)
        total = total + (probabilities if stack_size(model) is None else probabilities.mean(0))
    return total / prediction.samples


def random_targets(labels: torch.Tensor, classes: int, seed: int) -> torch.Tensor:
    """A target != label per image, uniform over the other classes (seeded)."""
    shift = torch.randint(1, classes, labels.shape, generator=torch.Generator().manual_seed(seed))
    return (labels + shift) % classes


def fast_gradient_sign_step(
    model: nn.Module,
    x: torch.Tensor,
    targets: torch.Tensor,
    *,
    step: float,
    prediction: Prediction,
    noise: NoiseSource | None,
) -> torch.Tensor:
    """One targeted step: x - step * sign(grad_x -log pbar(target | x)), clipped to [0, 1]."""
    x = x.detach().requires_grad_(True)
    probabilities = predictive(model, x, prediction, noise)
    chosen = probabilities.gather(-1, targets[:, None]).clamp_min(torch.finfo(x.dtype).tiny)
    (gradient,) = torch.autograd.grad(-torch.log(chosen).sum(), x)
    return (x.detach() - step * gradient.sign()).clamp(0.0, 1.0)


def targeted_attack(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    config: AttackConfig,
    prediction: Prediction,
) -> AttackTrace:
    """Run the attack on ``images`` (N, ...) towards ``targets`` (N,); see the module docstring.

    The attack's draws and the judge's draws come from two independent streams per member.
    """
    models = range(stack_size(model) or 1)
    device = images.device
    attack_noise = ModelGenerators.for_keys(config.seed, models, "train", device)
    judge_noise = ModelGenerators.for_keys(config.seed, models, "eval", device)
    success, entropies = [], []
    x = images.detach().clone()
    for iteration in range(config.iterations + 1):
        with torch.no_grad():
            judged = predictive(model, x, prediction, judge_noise)
        success.append(float((judged.argmax(-1) == targets).float().mean()))
        entropies.append(float(entropy(judged).mean()))
        if iteration < config.iterations:
            x = fast_gradient_sign_step(
                model, x, targets, step=config.step, prediction=prediction, noise=attack_noise
            )
    return AttackTrace(np.asarray(success), np.asarray(entropies))
