"""Variance-network families, dense and conv: LRT vs weight sampling, zero-mean layers, masks."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional

import vbnn
from vbnn.classification.inference import predict_probabilities
from vbnn.core.contracts import ForwardMode
from vbnn.core.kernels import gaussian_from_moments
from vbnn.core.randomness import ModelGenerators, NoiseTape
from vbnn.layers import FAMILIES
from vbnn.layers.shell import LOG_ALPHA_RANGE, VARIANCE_FLOOR
from vbnn.layers.zero_mean import ZeroMean
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.priors import ARDPrior

MODELS = 2
DENSE = (3, 2)  # in, out
CONV = (2, 2, 3)  # in channels, out channels, kernel
IMAGE = 4  # input height = width -> output 2 x 2


def make(name: str, conv: bool, **options) -> torch.nn.Module:
    sizes = CONV[:2] if conv else DENSE
    layer = FAMILIES[name].build(
        *sizes,
        ModelGenerators([1, 2]),
        dtype=torch.float64,
        kernel_size=CONV[2] if conv else None,
        **options,
    )
    with torch.no_grad():  # make the noise large and distinct per weight
        for name_, parameter in layer.named_parameters():
            if "log" in name_:
                parameter.add_(0.3 * torch.randn_like(parameter) + 0.5)
            if name_ == "bias":
                parameter.normal_()
    return layer


def inputs(conv: bool, rows: int = 2) -> torch.Tensor:
    shape = (MODELS, rows, CONV[0], IMAGE, IMAGE) if conv else (MODELS, rows, DENSE[0])
    return torch.randn(*shape, dtype=torch.float64)


def exact_moments(layer, x: torch.Tensor, conv: bool):
    """Mean and variance of the output computed per model without the layer's operator."""
    mean_w, var_w = layer.weight_moments()
    bias = layer.posterior_mean()[1]
    if not conv:
        mean = torch.einsum("mni,mio->mno", x, mean_w) + bias.unsqueeze(1)
        return mean, torch.einsum("mni,mio->mno", x * x, var_w)
    means, variances = [], []
    for m in range(MODELS):
        means.append(functional.conv2d(x[m], mean_w[m], bias[m]))
        variances.append(functional.conv2d(x[m] ** 2, var_w[m]))
    return torch.stack(means), torch.stack(variances)


LRT_CASES = [
    ("vd-layer", {}),
    ("vd-neuron", {}),
    ("vd-weight", {}),
    ("additive", {}),
    ("zero-mean", {}),
    ("bernoulli-variance", {"moment_matching": True}),
    ("uniform-variance", {"moment_matching": True}),
    ("bernoulli-variance", {}),
    ("uniform-variance", {}),
    ("dropout", {}),
]


@pytest.mark.parametrize("conv", [False, True], ids=["dense", "conv"])
@pytest.mark.parametrize(("name", "options"), LRT_CASES)
def test_sample_and_weight_draws_have_the_exact_output_moments(name, options, conv) -> None:
    """SAMPLE (LRT: one draw per example and position) and WEIGHTS (explicit weight samples) both
    match the exact per-example mean and variance of the output (5 standard errors)."""
    layer = make(name, conv, **options)
    x = inputs(conv)
    with torch.no_grad():
        # binary dropout: weight_moments is the marginal of W z / (1 - p)
        mean, var = exact_moments(layer, x, conv)
        draws = 6000
        generators = ModelGenerators([11, 12])
        if layer.exact_lrt:  # independent draws per example: replicate the examples
            repeated = x.repeat_interleave(draws, dim=1)
            sampled = layer(repeated, ForwardMode.LOCAL, generators)
            sampled = sampled.reshape(MODELS, x.shape[1], draws, *sampled.shape[2:]).movedim(2, 0)
        else:  # one weight sample per call, shared by the examples
            sampled = torch.stack(
                [layer(x, ForwardMode.LOCAL, generators) for _ in range(draws // 3)]
            )
        weights = torch.stack(
            [layer(x, ForwardMode.WEIGHTS, generators) for _ in range(draws // 3)]
        )
    for got in (sampled, weights):
        count = got.shape[0]
        assert torch.all((got.mean(0) - mean).abs() <= 5 * (var / count).sqrt() + 1e-12)
        # variance of a sample variance <= (kurtosis bound 9 for these noises) var^2 / count
        assert torch.all((got.var(0) - var).abs() <= 5 * var * math.sqrt(8 / count) + 1e-12)


def test_conv_lrt_noise_is_independent_per_position() -> None:
    """Appendix E: eps_jhw is drawn per output position; weight samples correlate positions."""
    layer = make("vd-layer", conv=True)
    x = inputs(conv=True, rows=1).repeat_interleave(4000, dim=1)
    with torch.no_grad():
        lrt = layer(x, ForwardMode.LOCAL, ModelGenerators([3, 4]))
        weights = torch.stack([layer(x[:, :1], ForwardMode.WEIGHTS, ModelGenerators([5, 6]))])
        shared = torch.cat(
            [layer(x[:, :1], ForwardMode.WEIGHTS, ModelGenerators([k, k + 1])) for k in range(800)],
            dim=1,
        )
    del weights

    def correlation(out: torch.Tensor) -> float:
        a, b = out[0, :, 0, 0, 0], out[0, :, 0, 0, 1]
        return float(torch.corrcoef(torch.stack([a, b]))[0, 1])

    assert abs(correlation(lrt)) < 4 / math.sqrt(4000)
    assert abs(correlation(shared)) > 0.2


@pytest.mark.parametrize("conv", [False, True], ids=["dense", "conv"])
def test_zero_mean_layer_expected_output_is_exactly_zero(conv: bool) -> None:
    layer = make("zero-mean", conv, bias=False)
    x = inputs(conv, rows=3)
    mean_weight, _ = layer.weight_moments()
    assert torch.count_nonzero(mean_weight) == 0
    assert torch.count_nonzero(layer(x, ForwardMode.MEAN)) == 0
    with torch.no_grad():
        draws = layer(x.repeat_interleave(5000, 1), ForwardMode.LOCAL, ModelGenerators([1, 2]))
    draws = draws.reshape(MODELS, 3, 5000, *draws.shape[2:])
    assert torch.all(draws.mean(2).abs() < 5 * draws.std(2) / math.sqrt(5000))


def test_zero_mean_network_mean_propagation_is_constant_in_the_input() -> None:
    config = LeNetConfig(families=("point", "point", "zero-mean", "point"))
    model = LeNet5(config, ModelGenerators([0]), dtype=torch.float64)
    images = torch.rand(1, 6, 1, 28, 28, dtype=torch.float64)
    probabilities = predict_probabilities(model, images, ForwardMode.MEAN)
    torch.testing.assert_close(probabilities, probabilities[:, :1].expand_as(probabilities))
    # but its samples do depend on the input
    ensemble = predict_probabilities(
        model, images, ForwardMode.WEIGHTS, ModelGenerators([1]), samples=3
    )
    assert float((ensemble - ensemble[:, :1]).abs().max()) > 1e-6


@pytest.mark.parametrize("bias", [False, True])
def test_tanh_network_without_biases_is_odd_in_the_zero_mean_layer_noise(bias: bool) -> None:
    """After a zero-mean dense1, tanh and a bias-free dense2 the logits are odd in dense1's noise:
    eps and -eps are equally likely and give opposite logits, so a single sample predicts any
    class with probability at most 1/2 (reproductions/variance-networks/README.md, appendix C).
    Biases break the symmetry."""
    families = ("point", "point", "zero-mean", "point")
    model = LeNet5(LeNetConfig(families, "tanh", bias=bias), ModelGenerators([0]), torch.float64)
    if bias:
        with torch.no_grad():
            model.layers[3].bias.normal_()
    images = torch.rand(1, 4, 1, 28, 28, dtype=torch.float64)
    recorder = NoiseTape(source=ModelGenerators([1]))
    model(images, ForwardMode.LOCAL, recorder)
    assert len(recorder.calls) == 1  # dense1's LRT noise is the only draw
    noise = [torch.randn(1, *shape, dtype=dtype) for shape, dtype in recorder.calls]  # M = 1
    logits = model(images, ForwardMode.LOCAL, NoiseTape(noise))
    flipped = model(images, ForwardMode.LOCAL, NoiseTape([-block for block in noise]))
    odd = torch.allclose(flipped, -logits)
    assert odd is not bias


def test_zero_mean_mode_drops_the_means_and_restores_the_mode() -> None:
    layer = make("vd-weight", conv=False)
    x = inputs(conv=False)
    weights = layer(x, ForwardMode.WEIGHTS, ModelGenerators([5, 6]))
    with vbnn.mode(layer, "zero-mean"):
        centred = layer(x, None, ModelGenerators([5, 6]))
    torch.testing.assert_close(centred, weights - x @ layer.weight_mean)
    assert layer.forced_mode is None
    torch.testing.assert_close(
        layer(x, ForwardMode.MEAN), x @ layer.weight_mean + layer.bias.unsqueeze(1)
    )


def test_bernoulli_and_uniform_weight_samples_have_their_support() -> None:
    for name, check in (
        ("bernoulli-variance", lambda w, t: torch.allclose(w.abs(), t)),
        ("uniform-variance", lambda w, t: bool(torch.all(w.abs() <= t))),
    ):
        layer = make(name, conv=False)
        theta = layer.weight_log_scale.exp().detach()
        weight = layer.sample_weight(ModelGenerators([1, 2])).detach()
        assert check(weight, theta)


def test_prune_by_std_zeroes_small_sigmas() -> None:
    layer = make("zero-mean", conv=False)
    sigma = layer.weight_log_std.exp().detach()
    threshold = float(sigma.median())
    fraction = layer.prune_by_std(threshold)
    assert fraction == pytest.approx(float((sigma < threshold).float().mean()))
    _, var = layer.effective_moments()
    assert torch.all(var[sigma < threshold] == 0)
    assert torch.all(var[sigma >= threshold] > 0)


def test_log_alpha_is_clipped() -> None:
    layer = make("vd-layer", conv=False)
    with torch.no_grad():
        layer.log_alpha.fill_(100.0)
    assert float(layer.clipped_log_alpha().detach().max()) == LOG_ALPHA_RANGE[1]
    assert torch.isfinite(layer.kl(ARDPrior())).all()


def test_wrong_conv_input_is_named() -> None:
    layer = make("vd-layer", conv=True)
    with pytest.raises(ValueError, match=r"expected \(M=2, N, 2, H, W\)"):
        layer(torch.randn(2, 3, 5, 4, 4, dtype=torch.float64), ForwardMode.MEAN)


def test_zero_mean_approximation_is_harmless_for_large_alpha_only() -> None:
    """Neklyudov et al. 2019 Theorem 1: N(mu, alpha mu^2) -> N(0, alpha mu^2) changes the output
    mean by x mu, which is negligible against the output std sqrt(alpha) |x| |mu| only when alpha is
    large."""
    layer = make("vd-layer", conv=False, bias=False)
    x = inputs(conv=False, rows=50)
    for log_alpha, small in ((15.0, True), (-4.0, False)):
        with torch.no_grad():
            layer.log_alpha.fill_(log_alpha)
        mean, var = layer.effective_moments()
        shift = (x @ mean).abs()  # the zero-mean posterior keeps var and drops the mean
        std = (x**2 @ var).sqrt()
        assert bool((shift < 1e-3 * std).all()) is small


@pytest.mark.parametrize("kernel_size", [None, 3], ids=["dense", "conv"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_zero_mean_lrt_without_the_mean_product_is_the_lrt_of_zero_means(kernel_size, bias):
    """A variance layer's LOCAL draw skips the product of the inputs with its all-zero weight
    means (the bias alone is the mean): the same draws and gradients as the shell's LRT with the
    zero means multiplied out."""
    torch.manual_seed(3)
    layer = ZeroMean(4, 3, kernel_size=kernel_size, bias=bias, num_models=2)
    if bias:
        with torch.no_grad():
            layer.bias.normal_()
    shape = (2, 5, 4) if kernel_size is None else (2, 5, 4, 6, 6)
    x = torch.randn(shape, requires_grad=True)
    out = layer(x, ForwardMode.LOCAL, noise=ModelGenerators([1, 2]))
    mean_weight, var_weight = layer.effective_moments()
    mean_bias, var_bias = layer.bias_moments()
    mean = layer.operator.apply(x, mean_weight, mean_bias)
    var = layer.operator.apply(x * x, var_weight, var_bias)
    eps = ModelGenerators([1, 2]).randn(*var.shape[1:])
    expected = gaussian_from_moments(mean, var, eps, VARIANCE_FLOOR)
    torch.testing.assert_close(out, expected)
    weights = torch.randn(out.shape)
    inputs = [x, *layer.parameters()]
    got = torch.autograd.grad((out * weights).sum(), inputs)
    want = torch.autograd.grad((expected * weights).sum(), inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
