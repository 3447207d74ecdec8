"""Variational multi-head attention: ``nn.MultiheadAttention`` with its projections drawn from q.

The query, key, value and output projections W_q (E, E), W_k (kdim, E), W_v (vdim, E), W_o
(E, E) (and their biases) are four dense family layers; torch's packed ``in_proj_weight`` is
split into the first three. With h heads of width d = E / h, for a query x (L, E) and keys and
values y (S, kdim), z (S, vdim) of one sequence (Vaswani et al. 2017, section 3.2):

    Q = x W_q + b_q,  K = y W_k + b_k,  V = z W_v + b_v   (split into h heads of width d),
    A_j = softmax(Q_j K_j^T / sqrt(d) + M),   out = concat_j(A_j V_j) W_o + b_o,

M the float form of the masks (``attn_mask`` (L, S) or (B h, L, S), ``key_padding_mask``
(B, S); a boolean True, -inf: not attended), as ``torch.nn.functional.multi_head_attention_
forward`` builds it. A draw of the projections is shared by all the positions of a sequence: by
default one draw for the minibatch, with ``draw="sequence"`` one per sequence
(``layers.sequence_weights``); MEAN mode uses the posterior means and equals the torch module.

Not supported (refused, naming the option): ``add_bias_kv`` and ``add_zero_attn``.

``VariationalTransformerEncoderLayer`` is ``nn.TransformerEncoderLayer`` without its inference
fast path, which reads the attention's packed weights and the feed-forward layers' weights
directly (``torch._transformer_encoder_layer_fwd``); ``vbnn.convert`` gives a converted encoder
layer this class. ``nn.TransformerDecoderLayer`` has no fast path and converts as it is.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from vbnn.layers.registry import family as family_spec
from vbnn.layers.sequence_weights import (
    DEFAULT_DRAW,
    SequenceDraw,
    draw_count,
    sequence_affine,
    sequence_weights,
)


def float_mask(mask: torch.Tensor | None, name: str, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean mask as 0 / -inf of ``dtype``; a float mask as it is (added to the scores).

    Raises:
        TypeError: naming ``name``, a mask neither boolean nor floating.
    """
    if mask is None or mask.is_floating_point():
        return None if mask is None else mask.to(dtype)
    if mask.dtype is not torch.bool:
        raise TypeError(f"{name} must be a bool or floating tensor, got {mask.dtype}")
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, -math.inf)


class VariationalMultiheadAttention(nn.Module):
    """``nn.MultiheadAttention`` whose projections are family layers (module docstring).

    Called as the torch module: ``output, weights = attention(query, key, value,
    key_padding_mask=None, need_weights=True, attn_mask=None, average_attn_weights=True,
    is_causal=False)``; query (L, B, E) ((B, L, E) with ``batch_first``, (L, E) unbatched),
    key (S, B, kdim), value (S, B, vdim); output like the query; weights (B, L, S) averaged over
    the heads or (B, h, L, S), None unless ``need_weights``.

    Args:
        embed_dim: E.
        num_heads: h (dividing E).
        dropout: the dropout rate on the attention weights, in training.
        bias: whether the projections have biases.
        kdim: the keys' width (None: E).
        vdim: the values' width (None: E).
        batch_first: inputs and outputs (B, L, E) instead of (L, B, E).
        family: the ``vbnn.FAMILIES`` name of the projection layers.
        draw: ``SequenceDraw``: one draw per minibatch (default) or per sequence.
        **options: passed to every family layer (``dtype``, ``init_std``, ...).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        *,
        family: str = "mf",
        draw: SequenceDraw | str = DEFAULT_DRAW,
        **options: Any,
    ) -> None:
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"VariationalMultiheadAttention: embed_dim={embed_dim} is not "
                             f"divisible by num_heads={num_heads}")  # fmt: skip
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first, self.draw = dropout, batch_first, SequenceDraw(draw)
        spec = family_spec(family)
        self.q_proj = spec.build(embed_dim, embed_dim, None, bias=bias, **options)
        self.k_proj = spec.build(self.kdim, embed_dim, None, bias=bias, **options)
        self.v_proj = spec.build(self.vdim, embed_dim, None, bias=bias, **options)
        self.out_proj = spec.build(embed_dim, embed_dim, None, bias=bias, **options)

    @classmethod
    def from_module(cls, module: nn.MultiheadAttention, family: str = "mf", **options: Any):
        """The variational copy of ``module``, its posterior means set from the module's
        projections (packed or separate), on its device and dtype.

        Raises:
            ValueError: ``add_bias_kv`` or ``add_zero_attn`` (not supported).
        """
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError(
                "VariationalMultiheadAttention: nn.MultiheadAttention with add_bias_kv=True or "
                "add_zero_attn=True is not supported"
            )
        if module._qkv_same_embed_dim:
            weights = module.in_proj_weight.detach().chunk(3)
        else:
            weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
            weights = tuple(weight.detach() for weight in weights)
        has_bias = module.in_proj_bias is not None
        biases = module.in_proj_bias.detach().chunk(3) if has_bias else (None,) * 3
        new = cls(module.embed_dim, module.num_heads, module.dropout, has_bias, module.kdim,
                  module.vdim, module.batch_first, family=family, dtype=weights[0].dtype,
                  **options)  # fmt: skip
        out_bias = module.out_proj.bias
        for layer, weight, bias in zip(
            (new.q_proj, new.k_proj, new.v_proj, new.out_proj),
            (*weights, module.out_proj.weight.detach()),
            (*biases, None if out_bias is None else out_bias.detach()),
            strict=True,
        ):
            layer.load_means(weight, bias)
        return new.to(weights[0].device).train(module.training)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention output and weights (class docstring); ``is_causal`` is torch's hint
        that ``attn_mask`` is the causal mask.

        Raises:
            RuntimeError: ``is_causal`` without ``attn_mask`` (as torch).
            ValueError: a mask or input of the wrong shape (the shapes named).
        """
        batched = query.dim() == 3
        if batched and not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        elif not batched:
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            key_padding_mask = None if key_padding_mask is None else key_padding_mask[None]
        (batch, length, _), source = query.shape, key.shape[1]
        if is_causal and attn_mask is None:
            raise RuntimeError("VariationalMultiheadAttention: is_causal needs attn_mask (the "
                               "causal mask), as nn.MultiheadAttention")  # fmt: skip
        mask = self._mask(attn_mask, key_padding_mask, batch, length, source, query.dtype)
        mode = self.q_proj.resolve_mode(None)
        count = draw_count(self.draw, mode, batch)
        heads = []
        for layer, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)):
            projected = sequence_affine(x, *sequence_weights(layer, count, mode))
            heads.append(projected.view(batch, -1, self.num_heads, self.head_dim).transpose(1, 2))
        q, k, v = heads  # (B, h, L or S, d)
        scores = (q * math.sqrt(1.0 / self.head_dim)) @ k.transpose(-2, -1)
        weights = torch.softmax(scores if mask is None else scores + mask, dim=-1)
        if self.training and self.dropout > 0:
            weights = functional.dropout(weights, self.dropout)
        out = (weights @ v).transpose(1, 2).reshape(batch, length, self.embed_dim)
        out = sequence_affine(out, *sequence_weights(self.out_proj, count, mode))
        out = (out if self.batch_first else out.transpose(0, 1)) if batched else out[0]
        if not need_weights:
            return out, None
        weights = weights.mean(1) if average_attn_weights else weights
        return out, weights if batched else weights[0]

    def _mask(self, attn_mask, key_padding_mask, batch, length, source, dtype):
        """The additive mask (B or 1, h or 1, L, S), or None."""
        attn_mask = float_mask(attn_mask, "attn_mask", dtype)
        padding = float_mask(key_padding_mask, "key_padding_mask", dtype)
        if attn_mask is not None:
            shapes = {2: (length, source), 3: (batch * self.num_heads, length, source)}
            if tuple(attn_mask.shape) != shapes.get(attn_mask.dim()):
                raise ValueError(f"VariationalMultiheadAttention: attn_mask "
                                 f"{tuple(attn_mask.shape)}, expected {shapes[2]} or "
                                 f"{shapes[3]}")  # fmt: skip
            heads = self.num_heads if attn_mask.dim() == 3 else 1  # torch's rows: b h + j
            attn_mask = attn_mask.view(-1, heads, length, source)
        if padding is not None:
            if tuple(padding.shape) != (batch, source):
                raise ValueError(f"VariationalMultiheadAttention: key_padding_mask "
                                 f"{tuple(padding.shape)}, expected {(batch, source)}")  # fmt: skip
            padding = padding.view(batch, 1, 1, source)
            attn_mask = padding if attn_mask is None else attn_mask + padding
        return attn_mask

    def extra_repr(self) -> str:
        family = self.q_proj.family_name
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kdim={self.kdim}, "
                f"vdim={self.vdim}, family={family}, draw={self.draw.value}")  # fmt: skip


class VariationalTransformerEncoderLayer(nn.TransformerEncoderLayer):
    """``nn.TransformerEncoderLayer`` that always runs its two blocks (module docstring): the
    same computation as torch's slow path, for any attention and feed-forward layers."""

    def forward(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))
