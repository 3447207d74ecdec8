"""Transposed convolutions (1-, 2- and 3-D) of every convolutional family: the mean against
torch's own ConvTransposeNd, LRT moments against explicit weight samples and the closed form,
a stack against its models alone, state_dict, the KL against the dense layer of the same
moments, a converted decoder, output_size and the refusals."""

from __future__ import annotations

import math

import pytest
import torch
from test_family_contract import CONV, MODELS, assert_same_moments, make
from torch import nn
from torch.nn import functional

import vbnn
from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.diagnostics.layers import diagnose_layers
from vbnn.layers import FAMILIES
from vbnn.layers.operators import Operator
from vbnn.networks.summary import summary_rows
from vbnn.priors.gaussian import GaussianPrior

RANKS = (1, 2, 3)
CHANNELS, OUTPUTS, KERNEL, IMAGE, ROWS = 2, 2, 3, 4, 3
# stride, padding, output padding and dilation of each rank's layer, none of them trivial
GEOMETRY = {
    1: {"stride": 2, "padding": 1, "output_padding": 1, "dilation": 1},
    2: {"stride": (2, 1), "padding": (1, 2), "output_padding": (1, 0), "dilation": (1, 2)},
    3: {"stride": (1, 2, 2), "padding": (0, 1, 1), "output_padding": (0, 1, 0), "dilation": 1},
}
TRANSPOSED = {1: functional.conv_transpose1d, 2: functional.conv_transpose2d,
              3: functional.conv_transpose3d}  # fmt: skip
TORCH_LAYERS = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
FAMILY_RANKS = [(name, rank) for name in CONV for rank in RANKS]
FAMILY_IDS = [f"{name}-conv_transpose{rank}d" for name, rank in FAMILY_RANKS]
WITHOUT_MEANS = ("zero-mean", "bernoulli-variance", "uniform-variance")  # weights not loaded
WITH_MEANS = [name for name in CONV if name not in WITHOUT_MEANS]
# families whose weights are factorised Gaussians: LOCAL draws the closed-form LRT marginal
GAUSSIAN = ("mf", "gd", "additive", "vd-layer", "vd-neuron", "vd-weight", "zero-mean")


def transposed(name: str, rank: int, **options) -> vbnn.VariationalLayer:
    """A float64 transposed convolution of family ``name`` (``make`` of the contract tests)."""
    return make(name, conv=True, rank=rank, transposed=True, **GEOMETRY[rank], **options)


def images(rank: int, models: int | None = MODELS, rows: int = ROWS) -> torch.Tensor:
    lead = () if models is None else (models,)
    return torch.randn(*lead, rows, CHANNELS, *(IMAGE,) * rank, dtype=torch.float64)


def torch_transposed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, rank: int):
    """Each model's input through torch's transposed convolution with that model's weight."""
    return torch.stack(
        [TRANSPOSED[rank](x[m], weight[m], None if bias is None else bias[m], **GEOMETRY[rank])
         for m in range(len(x))]
    )  # fmt: skip


@pytest.mark.parametrize(("name", "rank"), FAMILY_RANKS, ids=FAMILY_IDS)
def test_family_contract_holds_for_transposed_convolutions(name: str, rank: int) -> None:
    """Every mode gives torch's output shape; moments are of the (M, C, O, *k) layout; MEAN is
    torch's transposed convolution with the posterior means; the KL is one value per model."""
    layer = transposed(name, rank)
    x = images(rank)
    weight, bias = layer.posterior_mean()
    assert weight.shape == layer.posterior_std()[0].shape == (MODELS, CHANNELS, OUTPUTS,
                                                               *(KERNEL,) * rank)  # fmt: skip
    expected = torch_transposed(x, weight, bias, rank)
    torch.testing.assert_close(layer(x, ForwardMode.MEAN), expected, atol=1e-12, rtol=1e-12)
    for mode in ForwardMode:
        assert layer(x, mode, ModelGenerators([4, 5, 6])).shape == expected.shape
    if FAMILIES[name].variational and FAMILIES[name].closed_form_kl:
        assert layer.kl(GaussianPrior(1.0)).shape == (MODELS,)
    assert f"conv_transpose{rank}d" in repr(layer)


@pytest.mark.parametrize("name", WITH_MEANS)
@pytest.mark.parametrize("rank", RANKS)
def test_mean_mode_equals_torch_conv_transpose_with_the_same_weights(name: str, rank: int):
    original = TORCH_LAYERS[rank](CHANNELS, 3, KERNEL, **GEOMETRY[rank]).double()
    converted = vbnn.convert(original, name)
    x = images(rank, models=None)
    with vbnn.mode(converted, "mean"):
        torch.testing.assert_close(converted(x), original(x), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(("name", "rank"), FAMILY_RANKS, ids=FAMILY_IDS)
def test_local_and_weight_samples_draw_one_marginal(name: str, rank: int) -> None:
    """LOCAL (the LRT where it applies) against WEIGHTS (one explicit weight sample a draw):
    means and variances of every output within 5 standard errors."""
    layer = transposed(name, rank)
    x = images(rank, rows=2)
    generators = ModelGenerators([11, 12, 13])
    draws = 1_500
    with torch.no_grad():
        local = torch.stack([layer(x, ForwardMode.LOCAL, generators) for _ in range(draws)])
        weights = torch.stack([layer(x, ForwardMode.WEIGHTS, generators) for _ in range(draws)])
    assert_same_moments(local, weights)


@pytest.mark.parametrize("name", GAUSSIAN)
@pytest.mark.parametrize("rank", RANKS)
def test_explicit_weight_samples_have_the_lrt_moments(name: str, rank: int) -> None:
    """The closed form of the LRT for the transposed convolution (Kingma et al. 2015):
    mean = x *^T mu_W + mu_b, variance = x^2 *^T var(W) + var(b), against the Monte Carlo mean
    and variance of outputs computed by torch from explicit weight draws."""
    layer = transposed(name, rank)
    x = images(rank, rows=2)
    weight_mean, weight_var = layer.weight_moments()
    bias_mean, bias_var = layer.bias_moments()
    mean = torch_transposed(x, weight_mean, bias_mean, rank)
    var = torch_transposed(x * x, weight_var, bias_var, rank)
    generators = ModelGenerators([21, 22, 23])
    draws = 4_000
    with torch.no_grad():
        outputs = torch.stack(
            [torch_transposed(x, *layer.sample(generators), rank) for _ in range(draws)]
        )
    assert torch.all((outputs.mean(0) - mean).abs() <= 5 * (var / draws).sqrt() + 1e-12)
    # the variance of a sample variance of normal draws is 2 var^2 / (draws - 1)
    assert torch.all((outputs.var(0) - var).abs() <= 5 * var * math.sqrt(2 / (draws - 1)) + 1e-12)


@pytest.mark.parametrize("name", sorted(CONV))
def test_a_stack_of_models_equals_each_model_alone(name: str) -> None:
    """Model m of a stack equals the one-model stack of model m's parameters and noise stream,
    in every mode, and the single layer (no model dimension) equals the one-model stack."""
    rank = 2
    stack = transposed(name, rank)
    x = images(rank)
    states = stack.state_dict()
    together = {mode: stack(x, mode, ModelGenerators([7, 8, 9])) for mode in ForwardMode}
    for m, seed in enumerate((7, 8, 9)):
        alone = transposed(name, rank, generators=ModelGenerators([m]))
        alone.load_state_dict({key: value[m : m + 1] for key, value in states.items()})
        single = transposed(name, rank, generators=None)
        single.load_state_dict(alone.state_dict())
        for mode in ForwardMode:
            out = alone(x[m : m + 1], mode, ModelGenerators([seed]))[0]
            torch.testing.assert_close(out, together[mode][m])
            torch.testing.assert_close(single(x[m], mode, ModelGenerators([seed])), out)


@pytest.mark.parametrize("name", sorted(CONV))
def test_state_dict_round_trip_gives_the_same_layer(name: str) -> None:
    layer = transposed(name, 3)
    copy = transposed(name, 3, generators=ModelGenerators([40, 41, 42]))
    copy.load_state_dict(layer.state_dict())
    x = images(3, rows=2)
    for mode in ForwardMode:
        torch.testing.assert_close(
            copy(x, mode, ModelGenerators([1, 2, 3])), layer(x, mode, ModelGenerators([1, 2, 3]))
        )


def _as_dense(value: torch.Tensor, rank: int) -> torch.Tensor:
    """A transposed weight-shaped tensor (M, C, O, *k) (or one broadcast to it) as a dense
    layer's (M, C prod(k), O): the same numbers, each beside the output unit it belongs to."""
    if value.dim() != 3 + rank:
        return value
    order = (0, 1, *range(3, value.dim()), 2)
    return value.permute(order).reshape(value.shape[0], -1, value.shape[2])


KL_FAMILIES = [n for n in CONV if FAMILIES[n].variational and FAMILIES[n].closed_form_kl]


@pytest.mark.parametrize("name", KL_FAMILIES)
@pytest.mark.parametrize("rank", (1, 3))
def test_kl_equals_the_dense_layer_of_the_same_moments(name: str, rank: int) -> None:
    """The KL is a sum over the weights' marginals: the transposed layer and the dense layer
    holding its parameters give one KL to a Gaussian prior and to the family's own prior."""
    layer = transposed(name, rank)
    dense = FAMILIES[name].build(CHANNELS * KERNEL**rank, OUTPUTS, ModelGenerators([1, 2, 3]),
                                 dtype=torch.float64)  # fmt: skip
    dense.load_state_dict({k: _as_dense(v, rank) for k, v in layer.state_dict().items()})
    for prior in (GaussianPrior(0.7), layer.default_prior):
        torch.testing.assert_close(layer.kl(prior), dense.kl(prior))
    assert torch.all(layer.kl(GaussianPrior(0.7)) > 0)  # a log-uniform KL drops its constant


def test_neuron_dropout_shares_one_alpha_per_output_channel_of_the_transposed_layout() -> None:
    for rank in RANKS:
        layer = transposed("vd-neuron", rank)
        assert layer.log_alpha.shape == (MODELS, 1, OUTPUTS, *(1,) * rank)


def test_initial_means_keep_the_variance_of_a_standard_normal_input() -> None:
    """LeCun normal N(0, 1 / fan_in) with fan_in = C prod(k / stride), the products summed into
    one output on average: with kernel 4 and stride 2 every inner output position sums exactly
    C 2 2 products, so the mean network maps N(0, 1) inputs to outputs of variance ~1 there (the
    sum of squares of C 2 2 weights of variance 1 / (C 2 2), averaged over 32 channels)."""
    channels, outputs = 64, 32
    layer = vbnn.MeanField(channels, outputs, torch.Generator().manual_seed(0), kernel_size=4,
                           stride=2, padding=1, transposed=True, dtype=torch.float64)  # fmt: skip
    assert layer.operator.fan_in() == channels * 16 / 4
    x = torch.randn(32, channels, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        inner = layer(x, "mean")[..., 1:-1, 1:-1]  # the border positions sum fewer products
    weights_error = math.sqrt(2 / (channels * 4 * outputs))  # the weights' sum of squares
    assert abs(float(inner.var()) - 1) <= 5 * weights_error + 5 * math.sqrt(2 / inner.numel())


def decoder() -> nn.Module:
    """Linear -> ConvTranspose2d -> ConvTranspose2d: a code of 3 to a 1 x 9 x 9 image."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(3, 4 * 2 * 2),
        nn.Unflatten(1, (4, 2, 2)),
        nn.ReLU(),
        nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
        nn.ReLU(),
        nn.ConvTranspose2d(3, 1, (3, 2), stride=2, padding=(1, 0), dilation=(1, 2)),
    ).double()


@pytest.mark.parametrize("name", sorted(CONV))
def test_a_converted_decoder_keeps_the_original_means_for_every_family(name: str) -> None:
    original = decoder()
    code = torch.randn(5, 3, dtype=torch.float64)
    converted = vbnn.convert(original, name)
    layers = [m for m in converted.modules() if isinstance(m, vbnn.VariationalLayer)]
    assert [layer.operator.kind for layer in layers] == [
        "dense", "conv_transpose2d", "conv_transpose2d"
    ]  # fmt: skip
    assert all(type(layer) is FAMILIES[name].layer for layer in layers)
    if name in WITH_MEANS:
        with vbnn.mode(converted, "mean"):
            torch.testing.assert_close(converted(code), original(code), atol=1e-12, rtol=1e-12)
    assert converted.train()(code).shape == original(code).shape == (5, 1, 7, 9)
    rows = {row.path: row for row in summary_rows(converted)}
    assert [rows[path].family for path in ("0", "3", "5")] == [name] * 3
    variational = sum(p.numel() for layer in layers for p in layer.parameters())
    assert rows["variational"].parameters == rows["total"].parameters == variational


def test_output_size_picks_the_output_padding_as_torch_does() -> None:
    original = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    converted = vbnn.convert(original, "mf")
    x = torch.randn(4, 2, 5, 5, dtype=torch.float64)
    for size in ((9, 9), (10, 9), (4, 3, 10, 10)):
        with vbnn.mode(converted, "mean"):
            torch.testing.assert_close(converted(x, output_size=size), original(x, size))
        assert converted(x, "local", output_size=size).shape == original(x, size).shape
    assert converted.operator.output_padding == (0, 0)  # this call's padding only
    with pytest.raises(ValueError, match=r"output_size \(11, 9\) is not reachable .* \(9, 9\) and"
                                         r" \(10, 10\)"):  # fmt: skip
        converted(x, output_size=(11, 9))
    with pytest.raises(ValueError, match="output_size must have 2 or 4 entries"):
        converted(x, output_size=(3, 10, 10))
    dense = vbnn.convert(nn.Linear(2, 3), "mf")
    with pytest.raises(ValueError, match="output_size applies to transposed convolutions only"):
        dense(torch.randn(4, 2), output_size=(3,))


def test_refusals_name_the_layer_and_its_path() -> None:
    grouped = nn.Sequential(nn.ConvTranspose2d(4, 4, 3, groups=2))
    with pytest.raises(ValueError, match=r"0 \(ConvTranspose2d\) has groups=2, .*keep=\['0'\]"):
        vbnn.convert(grouped, "mf")
    reflected = nn.Sequential(nn.ConvTranspose2d(4, 4, 3))
    reflected[0].padding_mode = "reflect"  # torch refuses it at construction, not afterwards
    message = r"0 \(ConvTranspose2d\) has groups=1, padding_mode='reflect'; only groups=1 with"
    with pytest.raises(ValueError, match=message):
        vbnn.convert(reflected, "gd")
    with pytest.raises(ValueError, match=r"0 is an nn.ConvTranspose1d; family 'fc' is dense only"):
        vbnn.convert(nn.Sequential(nn.ConvTranspose1d(2, 2, 3)), "fc")
    layer = transposed("mf", 2, generators=None)
    with pytest.raises(ValueError, match=r"does not fit this conv_transpose2d layer: expected "
                                         r"\(N, 2, H, W\)"):  # fmt: skip
        layer(torch.randn(3, 3, 4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"expected \(2, 2, 3, 3\) for this conv_transpose2d"):
        layer.load_means(torch.zeros(2, 2, 3, 2, dtype=torch.float64))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"transposed": True}, "apply to convolutions only"),
        ({"output_padding": 1}, "apply to convolutions only"),
        ({"kernel_size": 3, "output_padding": 1}, "output_padding applies to transposed"),
        ({"kernel_size": 3, "transposed": True, "padding": "same"}, "takes ints, as nn.ConvT"),
        ({"kernel_size": (3,), "transposed": True, "stride": 2, "output_padding": 2},
         r"output_padding must be smaller than stride or dilation, got output_padding=\(2,\)"),
        ({"kernel_size": (3,), "transposed": True, "output_padding": (1, 1)},
         "output_padding must be an int or a tuple of 1 ints"),
    ],
)  # fmt: skip
def test_bad_transposed_arguments_are_named(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Operator(2, 3, **arguments)


def test_diagnosis_reads_the_units_of_the_transposed_layout() -> None:
    """Output channel 0 at the N(0, 1) prior (KL 0 in every incoming weight and its bias), the
    others far from it: one unit at the prior, found along the transposed layout's output axis."""
    layer = vbnn.MeanField(3, 4, kernel_size=3, transposed=True, init_std=1.0)
    with torch.no_grad():
        layer.weight_mean.fill_(0.5)
        layer.weight_mean[:, :, 0].zero_()
        layer.weight_log_std.fill_(math.log(0.01))
        layer.weight_log_std[:, :, 0].zero_()
        layer.bias_log_std.fill_(math.log(0.01))
        layer.bias_log_std[:, 0] = 0.0
        layer.bias_mean.fill_(0.5)
        layer.bias_mean[:, 0] = 0.0
    (diagnosis,) = diagnose_layers(nn.Sequential(layer))
    assert (diagnosis.units, diagnosis.units_at_prior) == (4, 1)
