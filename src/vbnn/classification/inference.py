"""One switch for how any stochastic network predicts (Neklyudov et al. 2019 eqs. 2-3).

``predict_probabilities(model, x, mode, generators, samples)`` works for any module whose
``forward(x, ForwardMode, generators)`` returns logits: (N, C) for one network, (M, N, C) for a
stack (``as_input`` adds nothing for one network and the model dimension for a stack):

* DETERMINISTIC: p(t | x, E_q W), mean propagation (eq. 3);
* SAMPLE: p(t | x, W), one weight sample per model shared by the examples;
* ENSEMBLE: 1/K sum_k p(t | x, W_k), W_k ~ q (eq. 2, test-time averaging);
* ZERO_MEAN: ENSEMBLE with every Gaussian q = N(mu, var) replaced by N(0, var) (Theorem 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, InferenceMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import stack_size
from vbnn.layers.shell import VariationalLayer
from vbnn.training.objectives import network_output


def as_input(model: nn.Module | int | None, x: torch.Tensor) -> torch.Tensor:
    """``x`` (N, ...) as ``model`` takes it: unchanged for one network, (M, N, ...) for a stack.

    ``model`` may also be its ``stack_size`` already read (an int, or None for one network), so
    that a training step does not walk the module tree."""
    models = stack_size(model) if isinstance(model, nn.Module) else model
    return x if models is None else x.expand(models, *x.shape)


@contextmanager
def zero_mean_approximation(model: nn.Module) -> Iterator[None]:
    """Within the block every ``VariationalLayer`` of ``model`` uses N(0, var) for N(mu, var)."""
    layers = [m for m in model.modules() if isinstance(m, VariationalLayer)]
    previous = [layer.zero_mean_approximation for layer in layers]
    try:
        for layer in layers:
            layer.zero_mean_approximation = True
        yield
    finally:
        for layer, value in zip(layers, previous, strict=True):
            layer.zero_mean_approximation = value


@torch.no_grad()
def predict_probabilities(
    model: nn.Module,
    x: torch.Tensor,
    mode: InferenceMode | str,
    generators: ModelGenerators | None = None,
    samples: int = 20,
    batch_size: int = 1000,
) -> torch.Tensor:
    """Predictive class probabilities (M, N, C) of ``x`` (M, N, ...) under ``mode``.

    Args:
        samples: K of ENSEMBLE and ZERO_MEAN.
        batch_size: examples per forward pass (memory only; the weight samples of one pass are
            shared by its examples, so with WEIGHTS sampling K weight draws are made per batch).
    """
    mode = InferenceMode(mode)
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if mode is not InferenceMode.DETERMINISTIC and generators is None:
        raise ValueError(f"inference mode {mode.value!r} samples weights: pass a ModelGenerators")
    rows = 0 if stack_size(model) is None else 1
    outputs = []
    for start in range(0, x.shape[rows], batch_size):
        chunk = x.narrow(rows, start, min(batch_size, x.shape[rows] - start))
        if mode is InferenceMode.DETERMINISTIC:
            outputs.append(torch.softmax(network_output(model, chunk, ForwardMode.MEAN), -1))
        elif mode is InferenceMode.SAMPLE:
            weights = network_output(model, chunk, ForwardMode.WEIGHTS, generators)
            outputs.append(torch.softmax(weights, -1))
        elif mode is InferenceMode.ENSEMBLE:
            outputs.append(_ensemble(model, chunk, generators, samples))
        else:
            with zero_mean_approximation(model):
                outputs.append(_ensemble(model, chunk, generators, samples))
    return torch.cat(outputs, dim=rows)


def _ensemble(model, x, generators, samples: int) -> torch.Tensor:
    total = 0.0
    for _ in range(samples):
        total = total + torch.softmax(network_output(model, x, ForwardMode.WEIGHTS, generators), -1)
    return total / samples


def accuracy(probabilities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Share of correct arg-max predictions per model, (M,); labels (N,) or (M, N)."""
    return (probabilities.argmax(-1) == labels).to(probabilities.dtype).mean(-1)
