"""One weight draw per sequence: the family layers behind recurrent and attention modules.

A recurrent or attention module applies the same weights at every time step or position of a
sequence, so a draw from q must be one function per sequence (Fortunato, Blundell & Vinyals
2017, section 3): the shell's LOCAL mode, which draws independent pre-activations per example
*and position*, would give every time step its own weights. The modules of
``layers.recurrent`` and ``layers.attention`` therefore hold their weights as dense family
layers (so the KL, the priors, ``vbnn.kl``, ``vbnn.mode``, ``use_noise`` and the optimizer
roles treat them as any other layer) and ask them here for B weight draws, one per sequence of
a minibatch of B, through the family's own ``sample``:

    W_b = sample(eps_b),    eps_b the b-th block of B independent noise blocks,

so every family draws its own q (Gaussian, variance layer, Bernoulli mask, full covariance).
``SequenceNoise`` hands a single-model family B blocks at once; the family's (1, ...)
parameters broadcast against them and ``sample`` returns (B, I, O) weights and (B, O) biases.

Modes (``ForwardMode``): LOCAL (training) and WEIGHTS draw the weights, LOCAL as WEIGHTS (an
exact LRT per sequence would need the weights' products over time steps, which are not
Gaussian); ZERO_MEAN draws w - mu as the shell does; MEAN uses the posterior means, one
(1, I, O) weight. How many draws: ``SequenceDraw``, by default one for the whole minibatch
(B = 1 above: one matrix product per step, the sequences sharing their draw), or one per
sequence (``draw="sequence"``).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import NoiseSource
from vbnn.layers.shell import VariationalLayer

Draw = tuple[torch.Tensor, torch.Tensor | None]


class SequenceDraw(str, Enum):
    """How many weight draws a forward pass makes outside MEAN mode.

    BATCH: one for the whole minibatch, shared by its sequences: one draw and one matrix product
    a step, as a convolution trains (the default, ``DEFAULT_DRAW``).
    SEQUENCE: one per sequence of the minibatch (Fortunato et al. 2017): independent functions
    for the sequences, at the cost of B draws and B matrix products a step.
    """

    SEQUENCE = "sequence"
    BATCH = "batch"


# The recurrent and attention modules' draw unless told otherwise: a draw per sequence reads B
# distinct weight matrices at every time step, and one draw a minibatch reached the lower test
# NLL within the same seconds on an LSTM and a transformer layer, as on the convolutions
# (benchmarks/sequence_models.py and the time-to-quality benchmark; numbers in
# benchmarks/README.md).
DEFAULT_DRAW = SequenceDraw.BATCH


class SequenceNoise:
    """A ``NoiseSource`` giving a single-model family ``count`` blocks per request.

    ``randn(*shape)`` returns (count, *shape): the block (1, count, *shape) of ``source``
    without its model dimension, so the b-th row is the noise of sequence b.

    Args:
        source: the layer's noise source, of one model.
        count: B, the number of draws.

    Raises:
        ValueError: ``source`` hands out blocks of more than one model (a stack's streams).
    """

    def __init__(self, source: NoiseSource, count: int) -> None:
        if count < 1:
            raise ValueError(f"SequenceNoise: count must be >= 1, got {count}")
        self.source, self.count = source, count

    def randn(
        self,
        *shape: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        block = self.source.randn(self.count, *shape, dtype=dtype, device=device)
        if block.shape[0] != 1:
            raise ValueError(
                f"SequenceNoise: the noise source gives {block.shape[0]} models' blocks; "
                f"recurrent and attention modules are single networks (one stream)"
            )
        return block[0]

    def get_state(self) -> Any:
        return self.source.get_state()

    def set_state(self, state: Any) -> None:
        self.source.set_state(state)


def sequence_weights(
    layer: VariationalLayer,
    count: int,
    mode: ForwardMode,
    noise: NoiseSource | None = None,
) -> Draw:
    """The weights of ``layer`` for a minibatch of ``count`` sequences in ``mode``.

    Args:
        layer: a single (not stacked) dense family layer, I -> O.
        count: B (1 for ``SequenceDraw.BATCH``).
        mode: the resolved forward mode.
        noise: the noise source (None: the layer's ``use_noise`` source or torch's global RNG).

    Returns:
        weight (B, I, O) and bias (B, O) or None; (1, I, O) and (1, O) in MEAN mode or for
        families without noise (point weights).

    Raises:
        ValueError: ``layer`` is a stack of models or a convolution (its name and shape given).
    """
    if layer.stacked or layer.operator.is_conv:
        raise ValueError(
            f"sequence_weights: {layer.extra_repr()} must be a single dense layer (no stack, "
            f"no convolution)"
        )
    if mode is ForwardMode.MEAN:
        return layer.effective_means()
    source = SequenceNoise(layer.resolve_noise(noise), count)
    return layer.effective_sample(source, zero_mean=mode is ForwardMode.ZERO_MEAN)


def sequence_affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """x_b W_b + b_b for every sequence b.

    Args:
        x: (B, I) or (B, T, I).
        weight: (B, I, O), or (1, I, O) shared by the sequences.
        bias: (B, O), (1, O) or None.

    Returns:
        (B, O) or (B, T, O).
    """
    if weight.shape[0] == 1:  # one weight: a plain matrix product
        out = x @ weight[0]
        return out if bias is None else out + bias[0]
    step = x.dim() == 2
    out = torch.bmm(x.unsqueeze(1) if step else x, weight)
    out = out.squeeze(1) if step else out
    if bias is None:
        return out
    return out + (bias if step else bias.unsqueeze(1))


def draw_count(draw: SequenceDraw, mode: ForwardMode, batch: int) -> int:
    """B for ``sequence_weights``: the batch size for per-sequence draws, else 1."""
    if mode is ForwardMode.MEAN or SequenceDraw(draw) is SequenceDraw.BATCH:
        return 1
    return batch
