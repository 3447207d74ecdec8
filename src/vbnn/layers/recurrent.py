"""Variational recurrent layers: ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` with weights drawn from q.

For layer l and direction d the input-to-hidden weights W_ih (I_l, G H) with bias b_ih and the
hidden-to-hidden weights W_hh (H, G H) with bias b_hh (G = 4 gates for the LSTM, 3 for the GRU,
1 for the plain RNN; I_0 = input_size, I_l = D H above, D = 2 when bidirectional) are each one
dense family layer, in torch's gate order. With x_t the input and h the hidden state, a = x_t W_ih
+ b_ih and c = h W_hh + b_hh split into the gates in that order:

    LSTM (i, f, g, o):  c_t = s(f) c_{t-1} + s(i) tanh(g),   h_t = s(o) tanh(c_t)
    GRU (r, z, n):      r = s(a_r + c_r), z = s(a_z + c_z), n = tanh(a_n + r (c_n)),
                        h_t = (1 - z) n + z h_{t-1}
    RNN:                h_t = tanh(a + c) (or relu)

(s the logistic sigmoid), exactly as ``torch.nn.LSTM`` / ``GRU`` / ``RNN`` document them. A draw
of the weights is shared by all the time steps of a sequence (Fortunato, Blundell & Vinyals
2017, section 3): by default one draw for the minibatch, with ``draw="sequence"`` one per
sequence (``layers.sequence_weights``); MEAN mode uses the posterior means and equals the torch
module with those weights. Between layers torch's ``dropout`` acts on the
outputs in training mode, as in torch.

Not supported (refused, naming the option): ``proj_size > 0`` and ``PackedSequence`` inputs.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch
from torch import nn
from torch.nn import functional
from torch.nn.utils.rnn import PackedSequence

from vbnn.layers.registry import family as family_spec
from vbnn.layers.sequence_weights import (
    DEFAULT_DRAW,
    SequenceDraw,
    draw_count,
    sequence_affine,
    sequence_weights,
)

Hidden = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


class RecurrentKind(str, Enum):
    """The cell: torch's ``nn.LSTM``, ``nn.GRU``, ``nn.RNN(nonlinearity="tanh" / "relu")``."""

    LSTM = "lstm"
    GRU = "gru"
    RNN_TANH = "rnn_tanh"
    RNN_RELU = "rnn_relu"


GATES = {RecurrentKind.LSTM: 4, RecurrentKind.GRU: 3}  # the plain RNN has one


def _suffix(layer: int, direction: int) -> str:
    """torch's parameter suffix: ``_l0``, ``_l0_reverse``, ..."""
    return f"_l{layer}" + ("_reverse" if direction else "")


class VariationalRecurrent(nn.Module):
    """A multi-layer LSTM, GRU or RNN whose weights are family layers (module docstring).

    Called as the torch module: ``output, h_n = rnn(x, h_0)`` (``output, (h_n, c_n)`` for the
    LSTM), x (T, B, I) or, with ``batch_first``, (B, T, I), or unbatched (T, I); output
    (T, B, D H); h_n, c_n (L D, B, H). The mode and noise come from ``vbnn.mode`` and
    ``vbnn.use_noise`` (training: one draw per minibatch or per sequence, ``draw``; eval: the
    means).

    Args:
        kind: a ``RecurrentKind`` or its value.
        input_size: I.
        hidden_size: H.
        num_layers: L.
        bias: whether the layers have b_ih and b_hh.
        batch_first: inputs and outputs (B, T, *) instead of (T, B, *).
        dropout: the dropout rate on the outputs of every layer but the last, in training.
        bidirectional: D = 2 directions.
        family: the ``vbnn.FAMILIES`` name of the weight layers.
        draw: ``SequenceDraw``: one draw per minibatch (default) or per sequence.
        **options: passed to every family layer (``dtype``, ``init_std``, ...).
    """

    def __init__(
        self,
        kind: RecurrentKind | str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        family: str = "mf",
        draw: SequenceDraw | str = DEFAULT_DRAW,
        **options: Any,
    ) -> None:
        super().__init__()
        self.kind, self.draw = RecurrentKind(kind), SequenceDraw(draw)
        if num_layers < 1 or hidden_size < 1 or not 0.0 <= dropout < 1.0:
            raise ValueError(
                f"VariationalRecurrent: num_layers={num_layers} and hidden_size={hidden_size} "
                f"must be >= 1 and dropout={dropout} in [0, 1)"
            )
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        self.bidirectional, self.proj_size = bidirectional, 0
        self.directions = 2 if bidirectional else 1
        spec, width = family_spec(family), GATES.get(self.kind, 1) * hidden_size
        self.input_weights, self.hidden_weights = nn.ModuleList(), nn.ModuleList()
        for layer in range(num_layers):
            size = input_size if layer == 0 else self.directions * hidden_size
            for _ in range(self.directions):
                self.input_weights.append(spec.build(size, width, None, bias=bias, **options))
                self.hidden_weights.append(
                    spec.build(hidden_size, width, None, bias=bias, **options)
                )

    @classmethod
    def from_module(cls, module: nn.RNNBase, family: str = "mf", **options: Any):
        """The variational copy of ``module`` (an ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN``), its
        posterior means set from the module's weights, on its device and dtype.

        Raises:
            ValueError: ``proj_size > 0`` (an LSTM with projections), or another module type.
        """
        kinds = {nn.LSTM: RecurrentKind.LSTM, nn.GRU: RecurrentKind.GRU}
        if isinstance(module, nn.RNN):
            kind = RecurrentKind(module.mode.lower())
        elif type(module) in kinds:
            kind = kinds[type(module)]
        else:
            raise ValueError(f"VariationalRecurrent: {type(module).__name__} is not an nn.LSTM, "
                             f"nn.GRU or nn.RNN")  # fmt: skip
        if module.proj_size > 0:
            raise ValueError(
                f"VariationalRecurrent: nn.LSTM with proj_size={module.proj_size} is not "
                f"supported (only proj_size=0)"
            )
        weight = module.weight_ih_l0
        new = cls(kind, module.input_size, module.hidden_size, module.num_layers, module.bias,
                  module.batch_first, module.dropout, module.bidirectional, family=family,
                  dtype=weight.dtype, **options)  # fmt: skip
        for index in range(len(new.input_weights)):
            suffix = _suffix(*divmod(index, new.directions))
            for part, layer in (("ih", new.input_weights), ("hh", new.hidden_weights)):
                bias = getattr(module, f"bias_{part}{suffix}") if module.bias else None
                layer[index].load_means(
                    getattr(module, f"weight_{part}{suffix}").detach(),
                    None if bias is None else bias.detach(),
                )
        return new.to(weight.device).train(module.training)

    def flatten_parameters(self) -> None:
        """Nothing to do (torch's cuDNN weight layout does not apply); kept for code that calls
        it on any recurrent module."""

    def forward(self, x: torch.Tensor, hx: Hidden | None = None) -> tuple[torch.Tensor, Hidden]:
        """Output and final hidden state(s), as the torch module (class docstring).

        Raises:
            TypeError: a ``PackedSequence`` input.
            ValueError: ``x`` or ``hx`` of the wrong shape (the shapes named).
        """
        if isinstance(x, PackedSequence):
            raise TypeError(
                "VariationalRecurrent: PackedSequence inputs are not supported; pad the "
                "sequences and pass the padded tensor"
            )
        batched = x.dim() == 3
        if x.dim() not in (2, 3) or x.shape[-1] != self.input_size:
            raise ValueError(f"VariationalRecurrent: input {tuple(x.shape)}, expected (T, B, "
                             f"{self.input_size}), (B, T, {self.input_size}) or unbatched (T, "
                             f"{self.input_size})")  # fmt: skip
        if not batched:
            x = x.unsqueeze(0)
            hx = None if hx is None else _map(hx, lambda h: h.unsqueeze(1))
        elif not self.batch_first:
            x = x.transpose(0, 1)
        h0, c0 = self._initial_state(x, hx)
        mode = self.input_weights[0].resolve_mode(None)
        count = draw_count(self.draw, mode, x.shape[0])
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.directions):
                index = layer * self.directions + direction
                state = (h0[index], None if c0 is None else c0[index])
                out, h, c = self._direction(x, index, direction == 1, state, mode, count)
                outputs.append(out)
                last_h.append(h)
                last_c.append(c)
            x = torch.cat(outputs, -1) if self.directions == 2 else outputs[0]
            if layer < self.num_layers - 1 and self.dropout > 0:
                x = functional.dropout(x, self.dropout, self.training)
        output = x if not batched else (x if self.batch_first else x.transpose(0, 1))
        output = output.squeeze(0) if not batched else output
        hidden: Hidden = torch.stack(last_h)
        if self.kind is RecurrentKind.LSTM:
            hidden = (hidden, torch.stack(last_c))
        return output, hidden if batched else _map(hidden, lambda h: h.squeeze(1))

    def _initial_state(self, x: torch.Tensor, hx: Hidden | None):
        """h_0 (and c_0) (L D, B, H): zeros when not given; shapes checked."""
        shape = (self.num_layers * self.directions, x.shape[0], self.hidden_size)
        if hx is None:
            zeros = x.new_zeros(shape)
            return zeros, zeros if self.kind is RecurrentKind.LSTM else None
        states = hx if isinstance(hx, tuple) else (hx,)
        if len(states) != (2 if self.kind is RecurrentKind.LSTM else 1):
            wanted = "(h_0, c_0)" if self.kind is RecurrentKind.LSTM else "h_0"
            raise ValueError(f"VariationalRecurrent: hx for {self.kind.value} takes {wanted}")
        for state in states:
            if tuple(state.shape) != shape:
                raise ValueError(
                    f"VariationalRecurrent: initial state {tuple(state.shape)}, expected {shape}"
                )
        return states[0], states[1] if len(states) == 2 else None

    def _direction(self, x, index, reverse, state, mode, count):
        """One layer in one direction over x (B, T, I): outputs (B, T, H), last h and c."""
        weight_ih, bias_ih = sequence_weights(self.input_weights[index], count, mode)
        weight_hh, bias_hh = sequence_weights(self.hidden_weights[index], count, mode)
        projected = sequence_affine(x, weight_ih, bias_ih)  # (B, T, G H), every step at once
        h, c = state
        steps = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
        outputs = [h] * x.shape[1]
        for t in steps:
            h, c = self._cell(projected[:, t], sequence_affine(h, weight_hh, bias_hh), h, c)
            outputs[t] = h
        return torch.stack(outputs, 1), h, c

    def _cell(self, a: torch.Tensor, b: torch.Tensor, h: torch.Tensor, c: torch.Tensor | None):
        """One step from a = x_t W_ih + b_ih and b = h W_hh + b_hh (module docstring)."""
        if self.kind is RecurrentKind.LSTM:
            i, f, g, o = (a + b).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c), c
        if self.kind is RecurrentKind.GRU:
            a_r, a_z, a_n = a.chunk(3, -1)
            b_r, b_z, b_n = b.chunk(3, -1)
            r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
            n = torch.tanh(a_n + r * b_n)
            return (1 - z) * n + z * h, None
        act = torch.tanh if self.kind is RecurrentKind.RNN_TANH else torch.relu
        return act(a + b), None

    def extra_repr(self) -> str:
        family = self.input_weights[0].family_name
        return (f"{self.kind.value}, {self.input_size}, {self.hidden_size}, num_layers="
                f"{self.num_layers}, bidirectional={self.bidirectional}, family={family}, "
                f"draw={self.draw.value}")  # fmt: skip


def _map(hidden: Hidden, function) -> Hidden:
    """``function`` applied to h (and c)."""
    if isinstance(hidden, tuple):
        return tuple(function(h) for h in hidden)  # type: ignore[return-value]
    return function(hidden)
