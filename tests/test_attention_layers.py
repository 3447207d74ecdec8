"""Variational multi-head attention and transformer layers: torch's in MEAN mode, one weight
draw per sequence shared by its positions."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

import vbnn
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators, TorchNoise
from vbnn.layers import FAMILIES
from vbnn.layers.attention import (
    VariationalMultiheadAttention,
    VariationalTransformerEncoderLayer,
)
from vbnn.layers.sequence_weights import sequence_weights
from vbnn.priors.gaussian import GaussianPrior

B, L, S = 3, 4, 5
CONFIGS = {
    "packed": {},
    "separate": {"kdim": 3, "vdim": 6},
    "no-bias": {"bias": False},
    "batch-first": {"batch_first": True},
}


def attention(seed: int = 0, **options) -> nn.MultiheadAttention:
    torch.manual_seed(seed)
    return nn.MultiheadAttention(8, 2, dtype=torch.float64, **options).eval()


def inputs(module: nn.MultiheadAttention, batch: int = B):
    shape = (lambda n: (batch, n)) if module.batch_first else (lambda n: (n, batch))
    return (torch.randn(*shape(L), 8, dtype=torch.float64),
            torch.randn(*shape(S), module.kdim, dtype=torch.float64),
            torch.randn(*shape(S), module.vdim, dtype=torch.float64))  # fmt: skip


def masks():
    torch.manual_seed(5)
    attn = torch.rand(L, S) > 0.6
    attn[:, 0] = False  # no fully masked row (torch gives NaN there, as we do)
    padding = torch.rand(B, S) > 0.6
    padding[:, 0] = False
    causal = nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    return [
        {},
        {"attn_mask": attn},
        {"key_padding_mask": padding},
        {"attn_mask": attn.double() * -1e9, "key_padding_mask": padding.double() * -1e9},
        {"attn_mask": attn.repeat(2 * B, 1, 1), "key_padding_mask": padding},  # (B h, L, S)
        {"need_weights": False, "key_padding_mask": padding},
        {"average_attn_weights": False, "attn_mask": attn},
        {"attn_mask": causal[:, :L], "is_causal": True, "need_weights": False, "_source": L},
    ]


@pytest.mark.parametrize("config", CONFIGS)
def test_mean_mode_equals_torch_with_masks_and_weights(config: str) -> None:
    module = attention(**CONFIGS[config])
    assert not vbnn.convert(module, "mf").training  # the original's train/eval state
    variational = vbnn.convert(module, "mf").eval()
    assert isinstance(variational, VariationalMultiheadAttention)
    for options in masks():
        options = dict(options)
        query, key, value = inputs(module)
        if options.pop("_source", None):  # self-attention for the causal mask (S = L)
            key, value = query, query
            if module.kdim != 8:
                continue
        expected, weights = module(query, key, value, **options)
        got, got_weights = variational(query, key, value, **options)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
        assert (got_weights is None) == (weights is None)
        if weights is not None:
            torch.testing.assert_close(got_weights, weights, rtol=1e-12, atol=1e-12)
    unbatched = [t[:, 0] if module.batch_first is False else t[0] for t in inputs(module)]
    torch.testing.assert_close(variational(*unbatched), module(*unbatched))


def drawn_attention(module, variational, draws, b: int) -> nn.MultiheadAttention:
    """The torch module holding sequence b's drawn projections (q, k, v, out)."""
    copy_ = copy.deepcopy(module)
    row = lambda t: t[b if t.shape[0] > 1 else 0]  # noqa: E731 (a point bias: (1, O))
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = draws
    with torch.no_grad():
        if module._qkv_same_embed_dim:
            copy_.in_proj_weight.copy_(torch.cat([row(w).t() for w in (wq, wk, wv)]))
        else:
            for name, weight in (("q", wq), ("k", wk), ("v", wv)):
                getattr(copy_, f"{name}_proj_weight").copy_(row(weight).t())
        copy_.out_proj.weight.copy_(row(wo).t())
        if module.in_proj_bias is not None:
            copy_.in_proj_bias.copy_(torch.cat([row(bias) for bias in (bq, bk, bv)]))
            copy_.out_proj.bias.copy_(row(bo))
    return copy_


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_sequence_is_torch_attention_with_its_own_draw(name: str) -> None:
    """One function per draw, every family: sequence b's output at every position is that of
    the torch module holding draw b; the sequences' draws differ (but for point weights)."""
    module = attention(kdim=3, vdim=6)
    options = {"std": 0.3} if name == "gd" else {}
    variational = vbnn.convert(module, name, **options, draw="sequence").train()
    query, key, value = inputs(module)
    noise = ModelGenerators([11])
    state = noise.get_state()
    with vbnn.use_noise(variational, noise):
        output, weights = variational(query, key, value, average_attn_weights=False)
    noise.set_state(state)
    layers = (variational.q_proj, variational.k_proj, variational.v_proj, variational.out_proj)
    with torch.no_grad():
        draws = [sequence_weights(layer, B, ForwardMode.WEIGHTS, noise) for layer in layers]
    for b in range(B):
        single = drawn_attention(module, variational, draws, b)
        expected, expected_weights = single(
            query[:, b : b + 1], key[:, b : b + 1], value[:, b : b + 1],
            average_attn_weights=False,
        )  # fmt: skip
        torch.testing.assert_close(output[:, b : b + 1], expected)
        torch.testing.assert_close(weights[b : b + 1], expected_weights)
    if FAMILIES[name].variational or name == "dropout":
        assert not torch.allclose(draws[0][0][0], draws[0][0][1])


def test_output_moments_match_explicit_weight_samples() -> None:
    """Outputs over 3000 copies of one sequence (one draw each) against 3000 torch modules
    holding projections drawn explicitly from N(mu, sigma^2): within 5 standard errors."""
    module = attention()
    variational = vbnn.convert(module, "mf", init_std=0.15, draw="sequence").train()
    query, key, value = (t[:, :1] for t in inputs(module, 1))
    draws = 3000
    torch.manual_seed(2)
    with torch.no_grad():
        many = [t.expand(-1, draws, -1) for t in (query, key, value)]
        sampled = variational(*many, need_weights=False)[0][-1]  # (draws, E), last position
        explicit = []
        layers = (variational.q_proj, variational.k_proj, variational.v_proj, variational.out_proj)
        for _ in range(draws):
            sample = [layer.sample(TorchNoise(1)) for layer in layers]
            single = drawn_attention(module, variational, sample, 0)
            explicit.append(single(query, key, value, need_weights=False)[0][-1, 0])
        explicit = torch.stack(explicit)
    mean_error = ((sampled.var(0) + explicit.var(0)) / draws).sqrt()
    assert torch.all((sampled.mean(0) - explicit.mean(0)).abs() < 5 * mean_error)
    var_error = math.sqrt(2 / (draws - 1)) * (sampled.var(0) ** 2 + explicit.var(0) ** 2).sqrt()
    assert torch.all((sampled.var(0) - explicit.var(0)).abs() < 5 * var_error)
    assert torch.all(sampled.var(0) > 1e-4)


def test_kl_is_the_sum_of_the_four_projections_closed_form() -> None:
    variational = vbnn.convert(attention(kdim=3, vdim=6), "mf", init_std=0.1)
    prior = GaussianPrior(0.5)
    total = torch.zeros((), dtype=torch.float64)
    layers = vbnn.variational_layers(variational)
    assert len(layers) == 4
    for layer in layers:
        for mean, std in ((layer.weight_mean, layer.weight_std()),
                          (layer.bias_mean, layer.bias_std())):  # fmt: skip
            total = total + (math.log(0.5) - std.log() + (std**2 + mean**2) / 0.5 - 0.5).sum()
    torch.testing.assert_close(vbnn.kl(variational, prior), total)


def classifier(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(8 * L, 3))


def test_transformer_layers_convert_and_equal_torch_in_mean_mode() -> None:
    original = classifier().double().eval()
    converted = vbnn.convert(original, "mf", init_std=0.1)
    encoder_layer = converted[0].layers[0]
    assert type(encoder_layer) is VariationalTransformerEncoderLayer
    assert isinstance(encoder_layer.self_attn, VariationalMultiheadAttention)
    assert isinstance(encoder_layer.linear1, vbnn.MeanField)
    x = torch.randn(B, L, 8, dtype=torch.float64)
    padding = torch.tensor([[False] * L, [False] * (L - 1) + [True], [False] * L])
    converted.eval()
    for options in ({}, {"src_key_padding_mask": padding}):
        expected = original[2](original[1](original[0](x, **options)))
        got = converted[2](converted[1](converted[0](x, **options)))
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    decoder = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True, norm_first=True)
    decoder = decoder.double().eval()
    variational_decoder = vbnn.convert(decoder, "mf").eval()
    memory, causal = torch.randn(B, S, 8, dtype=torch.float64), torch.ones(L, L).triu(1).bool()
    torch.testing.assert_close(
        variational_decoder(x, memory, tgt_mask=causal), decoder(x, memory, tgt_mask=causal)
    )
    converted.train()
    assert not torch.equal(converted(x), converted(x))  # training draws


def test_state_dict_round_trip() -> None:
    converted = vbnn.convert(classifier().double(), "mf", init_std=0.1)
    fresh = vbnn.convert(classifier(seed=1).double(), "mf")
    fresh.load_state_dict(converted.state_dict())
    x = torch.randn(B, L, 8, dtype=torch.float64)
    for mode in ("mean", "weights"):
        outputs = []
        for model in (converted.eval(), fresh.eval()):
            torch.manual_seed(3)
            with vbnn.mode(model, mode):
                outputs.append(model(x))
        torch.testing.assert_close(outputs[0], outputs[1])


def test_unsupported_options_and_masks_are_refused() -> None:
    for options in ({"add_bias_kv": True}, {"add_zero_attn": True}):
        with pytest.raises(ValueError, match="add_bias_kv=True or add_zero_attn=True"):
            vbnn.convert(attention(**options), "mf")
    variational = vbnn.convert(attention(), "mf")
    query, key, value = inputs(attention())
    with pytest.raises(RuntimeError, match="is_causal needs attn_mask"):
        variational(query, key, value, is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask \(4, 4\), expected \(4, 5\)"):
        variational(query, key, value, attn_mask=torch.zeros(L, L, dtype=torch.bool))
    with pytest.raises(TypeError, match="attn_mask must be a bool or floating"):
        variational(query, key, value, attn_mask=torch.zeros(L, S, dtype=torch.int64))
