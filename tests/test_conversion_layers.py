"""``vbnn.convert`` leaves no layer in silence: Conv1d/Conv3d converted with their means,
attention refused by path, other weights named in a warning (or refused with strict), the
summary's counts and per-layer mean log alpha, and inputs of another dtype named."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from test_family_contract import CONV
from torch import nn

import vbnn
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.attention import VariationalMultiheadAttention
from vbnn.layers.recurrent import VariationalRecurrent
from vbnn.networks.lenet import LAYER_NAMES, LeNet5, LeNetConfig
from vbnn.networks.summary import KEPT_ATTRIBUTE, human_bytes, mean_log_alpha, summary_rows

WITHOUT_MEANS = ("zero-mean", "bernoulli-variance", "uniform-variance")  # weights not loaded
WITH_MEANS = [name for name in CONV if name not in WITHOUT_MEANS]


def conv1d_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv1d(2, 4, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv1d(4, 3, 2, padding="same", dilation=2),
        nn.Flatten(),
        nn.Linear(3 * 4, 2),
    ).double()


def conv3d_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv3d(2, 4, (3, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1)),
        nn.BatchNorm3d(4),
        nn.ReLU(),
        nn.Conv3d(4, 2, 1, bias=False),
        nn.Flatten(),
        nn.Linear(2 * 4 * 2 * 6, 2),
    ).double()


@pytest.mark.parametrize("family", WITH_MEANS)
@pytest.mark.parametrize(
    ("net", "x_shape"), [(conv1d_net, (5, 2, 8)), (conv3d_net, (5, 2, 4, 5, 5))]
)
def test_converted_conv1d_and_conv3d_nets_keep_the_original_means(family, net, x_shape) -> None:
    original = net().eval()  # BatchNorm with its running statistics
    x = torch.randn(*x_shape, dtype=torch.float64)
    converted = vbnn.convert(original, family)
    layers = [m for m in converted.modules() if isinstance(m, vbnn.VariationalLayer)]
    assert len(layers) == 3 and all(type(m) is vbnn.FAMILIES[family].layer for m in layers)
    with vbnn.mode(converted, "mean"):
        torch.testing.assert_close(converted(x), original(x))
    assert converted.train()(x).shape == (5, 2)


def test_convert_refuses_what_a_family_or_the_shell_cannot_express() -> None:
    with pytest.raises(ValueError, match=r"convert: 0 is an nn\.Conv1d; family 'fc' is dense only"):
        vbnn.convert(conv1d_net(), "fc")
    grouped = nn.Sequential(
        nn.Linear(2, 2), nn.Unflatten(1, (2, 1, 1, 1)), nn.Conv3d(2, 2, 1, groups=2)
    )
    with pytest.raises(ValueError, match=r"2 \(Conv3d\) has groups=2.*keep=\['2'\]"):
        vbnn.convert(grouped, "mf")
    circular = nn.Sequential(nn.Conv1d(2, 2, 3, padding=1, padding_mode="circular"))
    with pytest.raises(ValueError, match=r"0 \(Conv1d\) has groups=1, padding_mode='circular'"):
        vbnn.convert(circular, "mf")
    with pytest.raises(ValueError, match=r"keep=\['9'\] are not modules of Sequential"):
        vbnn.convert(conv1d_net(), "mf", keep=["9"])


class Block(nn.Module):
    """A transformer block of one's own: attention, then a feed-forward layer on (*, I) rows."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.norm = nn.LayerNorm(8)
        self.feed_forward = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x + self.attention(x, x, x, need_weights=False)[0])
        return x + self.feed_forward(x)


def test_attention_converts_and_is_kept_on_request() -> None:
    torch.manual_seed(0)
    original = nn.Sequential(Block(), Block()).double().eval()
    converted = vbnn.convert(original, "mf")  # warnings are errors in the tests
    assert isinstance(converted[0].attention, VariationalMultiheadAttention)
    x = torch.randn(3, 4, 8, dtype=torch.float64)  # (batch, sequence, features): (*, I) rows
    with vbnn.mode(converted, "mean"):
        torch.testing.assert_close(converted(x), original(x))
    kept = vbnn.convert(original, "mf", keep=["0.attention", "1.attention"])
    assert isinstance(kept[0].feed_forward[0], vbnn.MeanField)
    assert type(kept[0].attention.out_proj) is type(original[0].attention.out_proj)
    with vbnn.mode(kept, "mean"):
        torch.testing.assert_close(kept(x), original(x))
    assert kept.train()(x).shape == x.shape
    with pytest.raises(ValueError, match=r"convert: 0: .*add_bias_kv.*keep=\['0'\]"):
        vbnn.convert(nn.Sequential(nn.MultiheadAttention(8, 2, add_bias_kv=True)), "mf")


class Tagger(nn.Module):
    """Weights convert does not replace: an embedding, an LSTM, a bare parameter, a norm."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.rnn = nn.LSTM(4, 4, batch_first=True)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 3)
        self.temperature = nn.Parameter(torch.ones(()))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(tokens))
        return self.head(self.norm(hidden)) / self.temperature


def test_weights_left_deterministic_are_named_in_a_warning_or_refused_with_strict() -> None:
    expected = r"\(root\) \(Tagger\), embed \(Embedding\); pass keep="
    with pytest.warns(UserWarning, match=expected) as record:
        converted = vbnn.convert(Tagger(), "mf")
    assert len(record) == 1 and "norm" not in str(record[0].message)
    assert isinstance(converted.head, vbnn.MeanField)
    assert isinstance(converted.rnn, VariationalRecurrent)
    assert converted(torch.tensor([[1, 2, 3]])).shape == (1, 3, 3)  # (*, I) through the head
    with pytest.raises(ValueError, match=expected):
        vbnn.convert(Tagger(), "mf", strict=True)
    quiet = vbnn.convert(Tagger(), "mf", keep=["", "embed", "rnn"], strict=True)  # on purpose
    assert isinstance(quiet.head, vbnn.MeanField) and type(quiet.embed) is nn.Embedding
    assert type(quiet.rnn) is nn.LSTM


def test_normalisation_layers_stay_deterministic_without_a_warning() -> None:
    net = nn.Sequential(nn.Conv1d(2, 4, 3), nn.BatchNorm1d(4), nn.GroupNorm(2, 4), nn.Flatten(),
                        nn.LayerNorm(24), nn.Linear(24, 1), nn.RMSNorm(1))  # fmt: skip
    converted = vbnn.convert(net, "mf")  # warnings are errors in the tests
    assert [type(m) for m in converted[1:3]] == [nn.BatchNorm1d, nn.GroupNorm]
    converted.train()
    x = torch.randn(4, 2, 8)
    with vbnn.mode(converted, "mean"):
        torch.testing.assert_close(converted(x), converted(x))  # BatchNorm draws nothing


def test_summary_lists_every_layer_and_counts_each_parameter_once(capsys) -> None:
    net = conv3d_net()
    converted = vbnn.convert(net, "vd-neuron", summary=True)
    printed = capsys.readouterr().out
    assert printed == vbnn.summary(converted) + "\n"
    lines = printed.splitlines()
    assert lines[0].split() == ["layer", "type", "family", "parameters", "memory", "reason"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    first = sum(p.numel() for p in converted[0].parameters())
    memory = human_bytes(8 * first).split()  # float64
    assert rows["0"] == ["NeuronDropout", "vd-neuron", str(first), *memory]
    assert rows["1"] == ["BatchNorm3d", "deterministic", "8", "64", "B", "by", "design"]
    variational = sum(p.numel() for m in converted if isinstance(m, vbnn.VariationalLayer)
                      for p in m.parameters())  # fmt: skip
    assert rows["variational"][0] == str(variational)
    assert rows["total"][0] == str(sum(p.numel() for p in converted.parameters()))
    shared = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    shared[1].weight = shared[0].weight  # tied: counted once, as parameters() does
    assert vbnn.summary(shared).splitlines()[-1].split() == ["total", "15", "60", "B"]


def test_summary_gives_each_deterministic_module_its_reason_and_survives_copies() -> None:
    """by design (normalisation), kept (under keep=), not convertible (left with a warning),
    not converted (a model that convert did not make); the record survives deepcopy, pickle and
    a wrapper module, and the variational total is the family layers' memory."""
    net = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), nn.LayerNorm(4),
                        nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2))  # fmt: skip
    with pytest.warns(UserWarning, match=r"0 \(Embedding\)"):
        converted = vbnn.convert(net, "mf", keep=["3"])
    expected = {"0": "not convertible", "1": "", "2": "by design", "3.0": "kept", "4": ""}
    for copied in (converted, copy.deepcopy(converted), pickle.loads(pickle.dumps(converted))):
        rows = summary_rows(copied)
        assert {row.path: row.reason for row in rows[:-2]} == expected
        variational = [p for m in (copied[1], copied[4]) for p in m.parameters()]
        assert rows[-2][3:5] == (sum(p.numel() for p in variational),
                                 sum(4 * p.numel() for p in variational))  # fmt: skip
    wrapped = {row.path: row.reason for row in summary_rows(nn.Sequential(converted))[:-2]}
    assert wrapped == {f"0.{path}": reason for path, reason in expected.items()}
    plain = {row.path: row.reason for row in summary_rows(net)[:-2]}
    assert plain == {"0": "not converted", "1": "not converted", "2": "by design",
                     "3.0": "not converted", "4": "not converted"}  # fmt: skip
    assert not any(KEPT_ATTRIBUTE in key for key in converted.state_dict())  # not a tensor


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (3 * 2**20, "3.0 MiB"),
     (5 * 2**30, "5.0 GiB"), (2**50, "1024.0 TiB")],
)  # fmt: skip
def test_memory_is_written_in_binary_units(count: int, text: str) -> None:
    assert human_bytes(count) == text


# --- dtypes -----------------------------------------------------------------------------------
def test_an_input_of_another_dtype_is_refused_naming_the_layer_and_both_dtypes() -> None:
    dense = vbnn.convert(nn.Linear(3, 2), "mf")
    with pytest.raises(TypeError, match=r"MeanField\(mf: dense, in=3, out=2, .*torch\.float32, got "
                                        r"torch\.float64"):  # fmt: skip
        dense(torch.randn(4, 3, dtype=torch.float64))
    with pytest.raises(
        TypeError, match=r"floating, not integer, input .*float32, got torch\.int64"
    ):
        dense(torch.ones(4, 3, dtype=torch.long))
    conv = vbnn.convert(nn.Conv3d(2, 2, 1), "gd").double()
    with pytest.raises(
        TypeError, match=r"FixedVariance\(gd: conv3d, in=2, out=2.*got torch\.float32"
    ):
        conv(torch.randn(1, 2, 3, 3, 3))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts: any floating input
        assert dense(torch.randn(4, 3, dtype=torch.bfloat16)).dtype == torch.bfloat16


# --- tied layers, bare layers, 1-D inputs -----------------------------------------------------
def test_a_layer_shared_by_two_paths_becomes_one_variational_layer() -> None:
    """Weight tying survives: one variational layer at both paths, the mean network equal to the
    original; keeping one path of a shared layer but not the other is refused."""
    layer = nn.Linear(4, 4)
    network = nn.Sequential(layer, nn.Tanh(), layer)
    converted = vbnn.convert(network, "mf")
    assert converted[0] is converted[2]
    assert sum(p.numel() for p in converted.parameters()) == 2 * (16 + 4)  # means and stds once
    x = torch.randn(5, 4)
    with vbnn.mode(converted, "mean"):
        torch.testing.assert_close(converted(x), network(x))
    with pytest.raises(ValueError, match=r"shared by \['0', '2'\], but keep covers only \['0'\]"):
        vbnn.convert(network, "mf", keep=["0"])


def test_a_bare_grouped_convolution_is_refused_without_a_keep_to_follow() -> None:
    with pytest.raises(ValueError, match=r"the layer \(Conv2d\) has groups=2.*it stays as it is"):
        vbnn.convert(nn.Conv2d(2, 2, 3, groups=2), "mf")


def test_a_single_dense_layer_takes_one_example_as_nn_linear_does() -> None:
    dense = vbnn.convert(nn.Linear(3, 2), "mf")
    with vbnn.mode(dense, "mean"):
        torch.testing.assert_close(dense(torch.ones(3)), dense(torch.ones(1, 3))[0])
    with pytest.raises(ValueError, match=r"input of shape \(4,\) .* expected \(\*, 3\)"):
        dense(torch.randn(4))


def test_mean_log_alpha_is_the_mean_clipped_log_alpha_of_model_0_in_each_layer_with_one() -> None:
    """log alpha: variational dropout's parameter (one per layer or per weight), the additive
    layer's 2 log sigma - log(mu^2 + 1e-8); clipped to [-10, 20]; none for a mean-field layer."""
    families = ("vd-layer", "additive", "vd-weight", "mf")
    model = LeNet5(LeNetConfig(families=families), ModelGenerators([1, 2]))
    conv1, conv2, dense1, _ = model.layers
    with torch.no_grad():
        conv1.log_alpha.copy_(torch.tensor([-12.0, 1.0]).reshape(conv1.log_alpha.shape))
        dense1.log_alpha.uniform_(-11.0, 21.0)
        conv2.weight_log_std.uniform_(-8.0, 0.0)
        additive = 2 * conv2.weight_log_std[0] - torch.log(conv2.weight_mean[0] ** 2 + 1e-8)
        expected = {
            "conv1": -10.0,
            "conv2": float(additive.clamp(-10.0, 20.0).mean()),
            "dense1": float(dense1.log_alpha[0].clamp(-10.0, 20.0).mean()),
        }
    got = mean_log_alpha(model, LAYER_NAMES)
    assert list(got) == list(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-5)
    unnamed = mean_log_alpha(model)
    assert list(unnamed) == ["layers.0", "layers.1", "layers.2"]
    assert list(unnamed.values()) == list(got.values())
    converted = vbnn.convert(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), "vd-layer")
    assert list(mean_log_alpha(converted)) == ["0", "2"]
    with pytest.raises(ValueError, match="3 names"):
        mean_log_alpha(model, LAYER_NAMES[:3])


# torch's first compile imports modules that warn of their own deprecations; none is vbnn's
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("family", ["mf", "vd-weight"])
def test_a_converted_model_under_torch_compile_gives_the_eager_loss_and_gradients(family) -> None:
    """``torch.compile`` of a user's loss over a converted model: no graph break stops it, and
    with the eager random number generator (Inductor's ``fallback_random``) the loss and every
    gradient are eager's to float rounding."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    eager, compiled = vbnn.convert(base, family), vbnn.convert(base, family)
    compiled.load_state_dict(eager.state_dict())
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))

    def loss(model: nn.Module) -> torch.Tensor:
        return nn.functional.cross_entropy(model(x), y) + vbnn.kl(model) / 100

    torch._dynamo.reset()
    torch.manual_seed(5)
    expected = loss(eager)
    expected.backward()
    torch.manual_seed(5)
    with torch._inductor.config.patch(fallback_random=True):
        got = torch.compile(loss, fullgraph=True)(compiled)
        got.backward()
    torch.testing.assert_close(got, expected)
    for (name, want), have in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(have.grad, want.grad, msg=name)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's first compile, as above
def test_the_compiled_kl_of_a_converted_model_is_eagers() -> None:
    """``torch.compile(vbnn.kl, fullgraph=True)``, the recipe of docs/families.md: one graph,
    eager's KL to float32 summation error and eager's gradients, on a layer large enough
    (20,000 weights) for the exp2 path of ``variance_from_log_std``."""
    torch.manual_seed(0)
    model = vbnn.convert(nn.Sequential(nn.Linear(200, 100), nn.ReLU(), nn.Linear(100, 3)), "mf")
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "log_std" in name:
                parameter.uniform_(-6.0, -1.0)
    expected = vbnn.kl(model)
    expected.backward()
    want = [parameter.grad.clone() for parameter in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    got = torch.compile(vbnn.kl, fullgraph=True)(model)
    got.backward()
    # each of ~20,000 terms of a few nats carries a rounding error of eps x its size
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=0.0)
    for (name, parameter), grad in zip(model.named_parameters(), want, strict=True):
        torch.testing.assert_close(parameter.grad, grad, msg=name)
