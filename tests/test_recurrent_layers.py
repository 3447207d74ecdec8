"""Variational LSTM / GRU / RNN: the torch module in MEAN mode, one weight draw per sequence."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import vbnn
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers import FAMILIES
from vbnn.layers.recurrent import VariationalRecurrent
from vbnn.layers.sequence_weights import SequenceDraw, sequence_weights
from vbnn.priors.gaussian import GaussianPrior

KINDS = {
    "lstm": lambda **kw: nn.LSTM(**kw),
    "gru": lambda **kw: nn.GRU(**kw),
    "rnn-tanh": lambda **kw: nn.RNN(**kw),
    "rnn-relu": lambda **kw: nn.RNN(nonlinearity="relu", **kw),
}
SHAPES = [  # (num_layers, bidirectional, bias, batch_first)
    (1, False, True, False),
    (2, True, True, True),
    (2, False, False, False),
    (3, True, False, True),
]


def original(kind: str, layers=2, bidirectional=True, bias=True, batch_first=True, seed=0):
    torch.manual_seed(seed)
    return KINDS[kind](input_size=3, hidden_size=4, num_layers=layers, bias=bias,
                       batch_first=batch_first, bidirectional=bidirectional,
                       dtype=torch.float64)  # fmt: skip


def initial_state(module: nn.RNNBase, batch: tuple[int, ...]):
    shape = (module.num_layers * (2 if module.bidirectional else 1), *batch, module.hidden_size)
    h0 = torch.randn(shape, dtype=torch.float64)
    return (h0, torch.randn_like(h0)) if isinstance(module, nn.LSTM) else h0


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("kind", KINDS)
def test_mean_mode_equals_the_torch_module(kind: str, shape) -> None:
    module = original(kind, *shape)
    variational = vbnn.convert(module, "mf").eval()
    x = torch.randn(*((5, 7) if module.batch_first else (7, 5)), 3, dtype=torch.float64)
    for hx in (None, initial_state(module, (5,))):
        expected, got = module(x, hx), variational(x, hx)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    unbatched = torch.randn(6, 3, dtype=torch.float64)  # (T, I), h_0 (L D, H)
    hx = initial_state(module, ())
    torch.testing.assert_close(variational(unbatched, hx), module(unbatched, hx))


def test_dropout_between_layers_is_torch_s_in_eval_and_acts_in_training() -> None:
    torch.manual_seed(0)
    module = nn.LSTM(3, 4, num_layers=2, dropout=0.5, dtype=torch.float64)
    variational = vbnn.convert(module, "point").eval()
    x = torch.randn(6, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(variational(x), module.eval()(x))
    variational.train()
    assert not torch.equal(variational(x)[0], variational(x)[0])  # point weights: the dropout


def drawn_module(module: nn.RNNBase, variational: VariationalRecurrent, draws, b: int):
    """The torch module with sequence b's drawn weights (``draws``: per index, ih then hh)."""
    copy_ = copy.deepcopy(module)
    with torch.no_grad():
        for index, ((w_ih, b_ih), (w_hh, b_hh)) in enumerate(draws):
            layer, direction = divmod(index, variational.directions)
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            row = lambda t: t[b if t.shape[0] > 1 else 0]  # noqa: E731 (a point bias: (1, O))
            getattr(copy_, f"weight_ih{suffix}").copy_(row(w_ih).t())
            getattr(copy_, f"weight_hh{suffix}").copy_(row(w_hh).t())
            if module.bias:
                getattr(copy_, f"bias_ih{suffix}").copy_(row(b_ih))
                getattr(copy_, f"bias_hh{suffix}").copy_(row(b_hh))
    return copy_


def draws_of(variational: VariationalRecurrent, count: int, noise, mode=ForwardMode.WEIGHTS):
    """The weights a forward pass draws, in its order."""
    return [
        (
            sequence_weights(variational.input_weights[i], count, mode, noise),
            sequence_weights(variational.hidden_weights[i], count, mode, noise),
        )
        for i in range(len(variational.input_weights))
    ]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_sequence_is_the_torch_module_with_its_own_drawn_weights(name: str) -> None:
    """One function per draw: sequence b's outputs at every step are those of the torch module
    holding draw b, for every family; two sequences get different draws (but point weights)."""
    module = original("lstm")
    options = {"std": 0.3} if name == "gd" else {}
    variational = vbnn.convert(
        module, name, **options, draw="sequence"
    ).train()  # training: LOCAL mode
    x = torch.randn(3, 5, 3, dtype=torch.float64)
    noise = ModelGenerators([7])
    state = noise.get_state()
    with vbnn.use_noise(variational, noise):
        output, (h_n, c_n) = variational(x)
    noise.set_state(state)
    with torch.no_grad():
        draws = draws_of(variational, 3, noise)
    for b in range(3):
        expected, (h_b, c_b) = drawn_module(module, variational, draws, b)(x[b : b + 1])
        torch.testing.assert_close(output[b : b + 1], expected)
        torch.testing.assert_close(h_n[:, b : b + 1], h_b)
        torch.testing.assert_close(c_n[:, b : b + 1], c_b)
    if FAMILIES[name].variational or name == "dropout":
        assert not torch.allclose(draws[0][0][0][0], draws[0][0][0][1])


def test_output_moments_match_explicit_weight_samples() -> None:
    """GRU outputs over 4000 sequences (one draw each) against 4000 torch GRUs holding weights
    drawn explicitly from N(mu, sigma^2): means and variances within 5 standard errors."""
    module = original("gru", layers=1, bidirectional=False)
    variational = vbnn.convert(module, "mf", init_std=0.2, draw="sequence").train()
    sequence = torch.randn(1, 4, 3, dtype=torch.float64)
    draws = 4000
    torch.manual_seed(1)
    with torch.no_grad():
        sampled = variational(sequence.expand(draws, -1, -1))[0][:, -1]  # (draws, H)
        explicit = []
        for _ in range(draws):
            copy_ = copy.deepcopy(module)
            for part, layer in (("ih", variational.input_weights[0]),
                                ("hh", variational.hidden_weights[0])):  # fmt: skip
                weight, bias = layer.sample(vbnn.core.randomness.TorchNoise(1))
                getattr(copy_, f"weight_{part}_l0").copy_(weight[0].t())
                getattr(copy_, f"bias_{part}_l0").copy_(bias[0])
            explicit.append(copy_(sequence)[0][0, -1])
        explicit = torch.stack(explicit)
    mean_error = (sampled.var(0) / draws + explicit.var(0) / draws).sqrt()
    assert torch.all((sampled.mean(0) - explicit.mean(0)).abs() < 5 * mean_error)
    var_error = math.sqrt(2 / (draws - 1)) * (sampled.var(0) ** 2 + explicit.var(0) ** 2).sqrt()
    assert torch.all((sampled.var(0) - explicit.var(0)).abs() < 5 * var_error)
    assert torch.all(sampled.var(0) > 1e-4)  # the draws do vary


def test_kl_is_the_sum_of_the_weight_layers_closed_form() -> None:
    variational = vbnn.convert(original("lstm"), "mf", init_std=0.1)
    prior = GaussianPrior(0.5)
    total = torch.zeros((), dtype=torch.float64)
    for layer in vbnn.variational_layers(variational):
        for mean, std in ((layer.weight_mean, layer.weight_std()),
                          (layer.bias_mean, layer.bias_std())):  # fmt: skip
            total = total + (math.log(0.5) - std.log() + (std**2 + mean**2) / 0.5 - 0.5).sum()
    assert len(vbnn.variational_layers(variational)) == 8  # 2 layers x 2 directions x (ih, hh)
    torch.testing.assert_close(vbnn.kl(variational, prior), total)


def test_state_dict_round_trip_and_one_draw_per_batch() -> None:
    variational = vbnn.convert(original("gru"), "mf", init_std=0.1)
    fresh = VariationalRecurrent(
        "gru", 3, 4, 2, batch_first=True, bidirectional=True, dtype=torch.float64
    )
    fresh.load_state_dict(variational.state_dict())
    x = torch.randn(4, 5, 3, dtype=torch.float64)
    for mode in ("mean", "weights"):
        outputs = []
        for model in (variational, fresh):
            torch.manual_seed(3)
            with vbnn.mode(model, mode):
                outputs.append(model(x)[0])
        torch.testing.assert_close(outputs[0], outputs[1])
    batch = VariationalRecurrent("gru", 3, 4, draw="batch", dtype=torch.float64)
    same = torch.randn(1, 5, 3, dtype=torch.float64).expand(4, -1, -1).transpose(0, 1)
    output = batch.train()(same)[0]  # (T, B, H): one draw, so identical sequences agree
    torch.testing.assert_close(output, output[:, :1].expand_as(output))


def test_unsupported_inputs_and_options_are_refused() -> None:
    with pytest.raises(ValueError, match=r"convert: 0: .*proj_size=2 is not supported.*keep"):
        vbnn.convert(nn.Sequential(nn.LSTM(3, 4, proj_size=2)), "mf")
    variational = vbnn.convert(original("lstm", layers=1, bidirectional=False), "mf")
    packed = pack_padded_sequence(torch.randn(2, 4, 3, dtype=torch.float64), [4, 2], True)
    with pytest.raises(TypeError, match="PackedSequence inputs are not supported"):
        variational(packed)
    with pytest.raises(ValueError, match=r"initial state \(1, 2, 5\), expected \(1, 2, 4\)"):
        variational(torch.randn(2, 4, 3, dtype=torch.float64), (torch.zeros(1, 2, 5),) * 2)
    with pytest.raises(ValueError, match="must be a single dense layer"):
        sequence_weights(vbnn.MeanField(3, 4, num_models=2), 2, ForwardMode.WEIGHTS)


def test_the_default_draw_is_one_per_minibatch() -> None:
    """Recurrent and attention modules share one draw across a minibatch unless told
    ``draw="sequence"``: identical sequences then give identical outputs in training."""
    recurrent = vbnn.convert(original("lstm", layers=1, bidirectional=False), "mf", init_std=0.2)
    attention = vbnn.convert(nn.MultiheadAttention(4, 2, dtype=torch.float64), "mf", init_std=0.2)
    assert recurrent.draw is attention.draw is SequenceDraw.BATCH
    same = torch.randn(1, 5, 3, dtype=torch.float64).expand(4, -1, -1)
    output = recurrent.train()(same)[0]
    torch.testing.assert_close(output, output[:1].expand_as(output))
    tokens = torch.randn(5, 1, 4, dtype=torch.float64).expand(-1, 4, -1)  # (L, B, E)
    output = attention.train()(tokens, tokens, tokens, need_weights=False)[0]
    torch.testing.assert_close(output, output[:, :1].expand_as(output))
    per_sequence = vbnn.convert(original("lstm", layers=1, bidirectional=False), "mf",
                                init_std=0.2, draw="sequence")  # fmt: skip
    output = per_sequence.train()(same)[0]
    assert not torch.allclose(output[0], output[1])


def test_convert_routes_draw_to_the_sequence_modules_only() -> None:
    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(3, 4, batch_first=True, dtype=torch.float64)
            self.head = nn.Linear(4, 2, dtype=torch.float64)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    model = vbnn.convert(Tagger(), "mf", draw="sequence", init_std=0.1)
    assert model.rnn.draw is SequenceDraw.SEQUENCE and model.head.training_mode.value == "local"
    with pytest.raises(ValueError, match=r"draw='sequence' is an option of recurrent and "):
        vbnn.convert(nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1)), "mf",
                     draw="sequence")  # fmt: skip
