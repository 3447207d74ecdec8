"""Predictive samples of any network holding family layers: the one ensemble helper.

``sample(model, x, samples)`` stacks K forward passes into (K, N, ...) ((K, M, N, ...) for a
stack of M models): with ``mode="weights"`` (the default) each pass draws one weight sample per
model shared by the batch, so sample k is one function f_k drawn from q; ``mode="zero-mean"``
draws from the zero-mean approximation of q (Neklyudov et al. 2019, Theorem 1); ``mode="local"``
draws the pre-activations per example (the LRT: the same per-example marginals, cheaper, but no
function-level correlation across examples). An ensemble prediction (Neklyudov et al. 2019 eq. 2)
averages a function of these samples; for a classifier, the class probabilities
``predictive_probabilities`` (1/K) sum_k softmax(f_k(x)), the one place every caller takes it.

Passes run without autograd, ``batch_size`` examples at a time, into one preallocated output, so
memory is the output plus one pass whatever K; every chunk of sample k restarts the noise sources
the layers draw from (``NoiseSource.get_state``/``set_state``) and torch's global RNG at the same
state, so in "weights" mode the chunks of one sample share its weights.
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.batch_rule import Inputs, apply, rows
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import NoiseSource, TorchNoise
from vbnn.layers.modes import network_output, stack_size, variational_layers


@torch.no_grad()
def sample(
    model: nn.Module,
    x: Inputs,
    samples: int,
    mode: ForwardMode | str = ForwardMode.WEIGHTS,
    batch_size: int | None = None,
    noise: NoiseSource | None = None,
) -> torch.Tensor:
    """K = ``samples`` outputs of ``model`` on ``x``: (K, N, ...) for one network and ``x``
    (N, ...); (K, M, N, ...) for a stack and ``x`` (M, N, ...). For one network ``x`` may be a
    mapping of inputs (N, ...) each, and the outputs the model's logits (``core.batch_rule``).

    Args:
        mode: "weights" (one weight draw per pass, default), "zero-mean" or "local" (LRT).
        batch_size: examples per pass (None: all of them).
        noise: a noise source (e.g. ``ModelGenerators([seed])``) for any network; None: the
            layers' ``use_noise`` source or torch's global RNG (seed it for repeatable samples).

    Raises:
        ValueError: ``samples`` or ``batch_size`` < 1, the mode "mean" (its passes are all
            equal), or a model with no family layer (its samples would all be equal).
    """
    if samples < 1 or (batch_size is not None and batch_size < 1):
        raise ValueError(f"sample: samples={samples}, batch_size={batch_size}: need >= 1")
    mode = ForwardMode(mode)
    if mode is ForwardMode.MEAN:
        raise ValueError("sample: mode 'mean' draws nothing; choose 'weights', 'zero-mean' or "
                         "'local'")  # fmt: skip
    if not variational_layers(model):
        raise ValueError(f"sample: {type(model).__name__} holds no vbnn family layer")
    dim = 0 if stack_size(model) is None else 1  # the examples' dimension of x
    count = rows(x) if dim == 0 else x.shape[dim]  # type: ignore[union-attr]
    step = batch_size or count
    sources = _noise_sources(model, noise) if step < count else []
    out: torch.Tensor | None = None
    for k in range(samples):
        states = [source.get_state() for source in sources]
        for start in range(0, count, step):
            if start > 0:  # every chunk of sample k draws from where its first chunk began
                for source, state in zip(sources, states, strict=True):
                    source.set_state(state)
            length = min(step, count - start)
            chunk = apply(x, lambda values: values.narrow(dim, start, length))  # noqa: B023
            value = network_output(model, chunk, mode, noise)
            if out is None:
                shape = list(value.shape)
                shape[dim] = count
                out = value.new_empty((samples, *shape))
            out[k].narrow(dim, start, length).copy_(value)
    assert out is not None
    return out


def _noise_sources(model: nn.Module, noise: NoiseSource | None) -> list[NoiseSource]:
    """Every noise source a pass of ``model`` may draw from, each once: torch's global RNG
    (other random modules, e.g. ``nn.Dropout``) and the source each family layer resolves
    (``noise``, else its ``use_noise`` source, else torch's global RNG)."""
    resolved = [layer.resolve_noise(noise) for layer in variational_layers(model)]
    seeded = [s for s in resolved if not (isinstance(s, TorchNoise) and s.generator is None)]
    return list({id(source): source for source in [TorchNoise(1), *seeded]}.values())


def class_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """softmax(f_k(x))_c of each draw, in float64: logits (K, ..., C) -> (K, ..., C).

    float64 so that the mean over draws and the metrics taken from it (log-likelihood of
    probabilities near 0, entropies) do not carry float32's rounding.
    """
    return torch.softmax(logits.double(), -1)


def predictive_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """The ensemble predictive p(y = c | x) = (1/K) sum_k softmax(f_k(x))_c (Neklyudov et al.
    2019 eq. 2), the draws on the leading dimension: logits (K, ..., C) -> (..., C), float64.

    With the logits of ``sample`` the draws are the K weight samples, in their order; with K = 1
    it is the softmax of the one draw.

    Raises:
        ValueError: ``logits`` with fewer than 2 dimensions (no draws dimension) or 0 draws.
    """
    if logits.dim() < 2 or logits.shape[0] == 0:
        raise ValueError(
            "predictive_probabilities: logits must be (K, ..., C) with K >= 1 draws, got shape "
            f"{tuple(logits.shape)}"
        )
    return class_probabilities(logits).mean(0)
