"""Every registered family obeys one contract, dense and conv; families checked against each
other; single models, modes, dtype and device."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.distributions import MultivariateNormal, kl_divergence
from torch.nn import functional

import vbnn
from vbnn.core.contracts import ForwardMode, ParameterRole
from vbnn.core.gaussian import kl_diagonal_gaussian, local_reparameterization_moments
from vbnn.core.randomness import ModelGenerators
from vbnn.layers import (
    FAMILIES,
    FullCovariance,
    LowRankCovariance,
    MeanField,
    Point,
    UniformVariance,
    VariationalLayer,
    family,
)
from vbnn.layers.full_covariance import JointGaussianLayer
from vbnn.priors.gaussian import GaussianPrior
from vbnn.training.optimizer import parameters_with_role

MODELS, ROWS, INPUTS, OUTPUTS = 3, 5, 4, 2
CHANNELS, KERNEL, IMAGE = 2, 3, 5  # conv: 2 -> OUTPUTS channels, 3 x 3 kernel, 5 x 5 images
ALL = sorted(FAMILIES)
CONV = sorted(name for name, spec in FAMILIES.items() if spec.convolution)
SHAPES = [(name, False) for name in ALL] + [(name, True) for name in CONV]
IDS = [f"{name}-{'conv' if conv else 'dense'}" for name, conv in SHAPES]
STOCHASTIC = [name for name in ALL if name != "point"]
# families whose KL to a Gaussian prior is finite and in closed form
WITH_KL = [name for name in ALL if FAMILIES[name].variational and FAMILIES[name].closed_form_kl]
KL_SHAPES = [(name, conv) for name, conv in SHAPES if name in WITH_KL]
KL_IDS = [f"{name}-{'conv' if conv else 'dense'}" for name, conv in KL_SHAPES]


def make(
    name: str, std: float = 0.3, conv: bool = False, rank: int = 2, **options
) -> VariationalLayer:
    """A float64 layer of family ``name`` whose weights start with std ``std`` (variational
    dropout: sqrt(alpha) = ``std``, the std relative to |mu|); ``conv``: a convolution over
    ``rank`` spatial dimensions (padding 1 unless ``options`` say otherwise)."""
    spec = FAMILIES[name]
    shape = {"kernel_size": (KERNEL,) * rank, "padding": options.pop("padding", 1)} if conv else {}
    if spec.std_option() in spec.accepted_options():
        options[spec.std_option()] = std
    elif "log_alpha" in spec.accepted_options():
        options["log_alpha"] = 2.0 * math.log(std)
    layer = spec.build(
        CHANNELS if conv else INPUTS,
        OUTPUTS,
        options.pop("generators", ModelGenerators([1, 2, 3])),
        dtype=torch.float64,
        **shape,
        **options,
    )
    if isinstance(layer, FullCovariance):  # a genuinely correlated posterior
        with torch.no_grad():
            layer.scale_lower.copy_(0.05 * torch.randn_like(layer.scale_lower).tril(-1))
    if isinstance(layer, LowRankCovariance):
        with torch.no_grad():
            layer.scale_factor.copy_(0.3 * torch.randn_like(layer.scale_factor))
    with torch.no_grad():  # point biases away from zero so that they are seen
        if getattr(layer, "bias", None) is not None:
            layer.bias.normal_()
    return layer


def inputs(
    conv: bool = False, models: int | None = MODELS, rows: int = ROWS, rank: int = 2
) -> torch.Tensor:
    lead = () if models is None else (models,)
    shape = (rows, CHANNELS, *(IMAGE,) * rank) if conv else (rows, INPUTS)
    return torch.randn(*lead, *shape, dtype=torch.float64)


def reference_output(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, conv: bool):
    """x * weight + bias per model without the layer's operator."""
    if not conv:
        return x @ weight + bias.unsqueeze(1)
    return torch.stack(
        [functional.conv2d(x[m], weight[m], bias[m], padding=1) for m in range(len(x))]
    )


@pytest.mark.parametrize(("name", "conv"), SHAPES, ids=IDS)
def test_family_satisfies_contract_and_shapes(name: str, conv: bool) -> None:
    layer = make(name, conv=conv)
    x = inputs(conv)
    out_shape = (MODELS, ROWS, OUTPUTS, IMAGE, IMAGE) if conv else (MODELS, ROWS, OUTPUTS)
    generators = ModelGenerators([7, 8, 9])
    for mode in ForwardMode:
        assert layer(x, mode, generators).shape == out_shape
    weight_mean, bias_mean = layer.posterior_mean()
    weight_std, bias_std = layer.posterior_std()
    weight_shape = (
        (MODELS, OUTPUTS, CHANNELS, KERNEL, KERNEL) if conv else (MODELS, INPUTS, OUTPUTS)
    )
    assert weight_mean.shape == weight_std.shape == weight_shape
    assert bias_mean.shape == bias_std.shape == (MODELS, OUTPUTS)
    if name in STOCHASTIC:
        assert torch.all(weight_std > 0)
    if FAMILIES[name].closed_form_kl and FAMILIES[name].variational:
        assert layer.kl(GaussianPrior(1.0)).shape == (MODELS,)


@pytest.mark.parametrize(("name", "conv"), SHAPES, ids=IDS)
def test_mean_mode_uses_posterior_means_and_accepts_the_mode_as_a_string(
    name: str, conv: bool
) -> None:
    layer = make(name, conv=conv)
    x = inputs(conv)
    weight, bias = layer.posterior_mean()
    expected = reference_output(x, weight, bias, conv)
    torch.testing.assert_close(layer(x, ForwardMode.MEAN), expected)
    torch.testing.assert_close(layer(x, "mean"), expected)  # once returned LRT samples


@pytest.mark.parametrize(("name", "conv"), SHAPES, ids=IDS)
def test_sample_moments_match_explicit_weight_samples(name: str, conv: bool) -> None:
    """LOCAL (LRT where it applies) and WEIGHTS draw from the same per-example marginal."""
    layer = make(name, conv=conv)
    x = inputs(conv, rows=2)
    draws = 1_500 if conv else 6_000
    generators = ModelGenerators([11, 12, 13])
    with torch.no_grad():
        sampled = torch.stack([layer(x, ForwardMode.LOCAL, generators) for _ in range(draws)])
        weights = torch.stack([layer(x, ForwardMode.WEIGHTS, generators) for _ in range(draws)])
    assert_same_moments(sampled, weights)


def assert_same_moments(first: torch.Tensor, second: torch.Tensor) -> None:
    """Two equally many draws (dim 0) of one distribution: means within 5 standard errors of
    their difference, variances within 5 standard errors of a variance difference."""
    draws = len(first)
    mean_gap = (first.mean(0) - second.mean(0)).abs()
    pooled_var = 0.5 * (first.var(0) + second.var(0))
    assert torch.all(mean_gap <= 5 * (2 * pooled_var / draws).sqrt())
    assert torch.all((first.var(0) - second.var(0)).abs() <= 5 * pooled_var * math.sqrt(4 / draws))


def _log_q(layer: VariationalLayer, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """log q(weight, bias) per model for the families with a closed-form KL."""
    if isinstance(layer, JointGaussianLayer):
        flat = torch.cat([weight, bias.unsqueeze(1)], 1).flatten(1)
        q = MultivariateNormal(layer.mean.flatten(1), covariance_matrix=layer.covariance())
        return q.log_prob(flat)
    if isinstance(layer, UniformVariance):
        theta = layer.weight_log_scale.exp()
        return (-torch.log(2 * theta)).flatten(1).sum(1)
    total = 0.0
    parts = [(weight, layer.weight_moments())]
    if layer.bias_moments()[1] is not None:
        parts.append((bias, layer.bias_moments()))
    for value, (mean, var) in parts:
        density = -0.5 * ((value - mean) ** 2 / var + torch.log(2 * math.pi * var))
        total = total + density.flatten(1).sum(1)
    return total


@pytest.mark.parametrize(("name", "conv"), KL_SHAPES, ids=KL_IDS)
def test_kl_matches_a_monte_carlo_estimate(name: str, conv: bool) -> None:
    """KL(q || N(0, 0.7^2)) against the mean of log q(w) - log p(w) over draws w ~ q."""
    layer = make(name, conv=conv)
    prior = GaussianPrior(0.7)
    generators = ModelGenerators([31, 32, 33])
    with torch.no_grad():
        values = []
        for _ in range(1_000):
            weight, bias = layer.sample(generators)
            log_p = prior.log_prob(weight)
            if layer.bias_moments()[1] is not None:
                log_p = log_p + prior.log_prob(bias)
            values.append(_log_q(layer, weight, bias) - log_p)
        values = torch.stack(values)
        kl = layer.kl(prior)
    standard_error = values.std(0) / math.sqrt(len(values))
    assert torch.all((values.mean(0) - kl).abs() <= 5 * standard_error + 1e-9)


@pytest.mark.parametrize("name", WITH_KL)
def test_kl_is_non_negative_and_differentiable(name: str) -> None:
    layer = make(name)
    kl = layer.kl(GaussianPrior(0.7))
    assert torch.all(kl > 0)
    kl.sum().backward()
    # a point bias (the variance-network families') is not a distribution: no KL gradient
    assert all(p.grad is not None for n, p in layer.named_parameters() if n != "bias")
    assert all(p.grad is None for n, p in layer.named_parameters() if n == "bias")


@pytest.mark.parametrize(("name", "conv"), SHAPES, ids=IDS)
def test_single_model_equals_the_one_model_stack(name: str, conv: bool) -> None:
    """A layer built without a stack takes (N, ...) and equals the M = 1 stack exactly."""
    stack = make(name, conv=conv, generators=ModelGenerators([4]))
    single = make(name, conv=conv, generators=None)
    single.load_state_dict(stack.state_dict())
    x = inputs(conv, models=None)
    for mode in ForwardMode:
        expected = stack(x.unsqueeze(0), mode, ModelGenerators([9]))[0]
        torch.testing.assert_close(single(x, mode, ModelGenerators([9])), expected)
        torch.testing.assert_close(single(x, mode.value, ModelGenerators([9])), expected)


@pytest.mark.parametrize("name", STOCHASTIC)
def test_training_samples_eval_gives_the_mean_and_mode_switches(name: str) -> None:
    layer = make(name, generators=None)
    x = inputs(models=None)
    mean = layer(x, ForwardMode.MEAN)
    layer.eval()
    torch.testing.assert_close(layer(x), mean)
    layer.train()
    assert not torch.allclose(layer(x), mean)
    with vbnn.mode(layer, "mean"):
        torch.testing.assert_close(layer(x), mean)
    torch.manual_seed(3)  # global RNG: reproducible like any torch module
    first = layer(x)
    torch.manual_seed(3)
    torch.testing.assert_close(layer(x), first)


@pytest.mark.parametrize("name", ALL)
def test_single_layers_work_in_sequential_with_dtype_device_and_state_dict(name: str) -> None:
    spec = FAMILIES[name]
    network = nn.Sequential(spec.build(INPUTS, 8), nn.ReLU(), spec.build(8, OUTPUTS)).double()
    x = torch.randn(ROWS, INPUTS, dtype=torch.float64)
    out = network(x)
    assert out.shape == (ROWS, OUTPUTS) and out.dtype == torch.float64
    out.sum().backward()
    copy = nn.Sequential(spec.build(INPUTS, 8), nn.ReLU(), spec.build(8, OUTPUTS)).double()
    copy.load_state_dict(network.state_dict())
    network.eval(), copy.eval()
    torch.testing.assert_close(copy(x), network(x))
    # every draw lands on the parameters' device ("meta" stands in for an accelerator)
    network.to("meta").train()
    for mode in ForwardMode:
        assert network[2](network[0](x.to("meta"), mode), mode).device.type == "meta"
        stacked = spec.build(INPUTS, OUTPUTS, ModelGenerators([1, 2])).to("meta")
        out = stacked(torch.randn(2, ROWS, INPUTS).to("meta"), mode, ModelGenerators([3, 4]))
        assert out.device.type == "meta"


@pytest.mark.parametrize("name", ALL)
def test_zero_mean_mode_centres_gaussian_families_and_leaves_the_others(name: str) -> None:
    """Neklyudov et al. 2019 Theorem 1: N(mu, var) -> N(0, var). With one weight draw shared by the
    batch, the zero-mean output equals the sampled output minus the mean network's weight
    contribution; point and binary-dropout layers (no such form) are unchanged."""
    layer, x = make(name), inputs()
    weights = layer(x, "weights", ModelGenerators([7, 8, 9]))
    with vbnn.mode(layer, "zero-mean"):
        zero = layer(x, None, ModelGenerators([7, 8, 9]))
    if not layer.has_zero_mean_form:
        torch.testing.assert_close(zero, weights)
        return
    mean_weight, mean_bias = layer.means()
    no_bias = torch.zeros_like(mean_bias) if mean_bias is not None else None
    shift = layer.operator.apply(x, mean_weight, no_bias)
    torch.testing.assert_close(zero, weights - shift)


@pytest.mark.parametrize(("name", "conv"), SHAPES, ids=IDS)
def test_mean_role_names_exactly_the_parameters_of_the_mean_network(name: str, conv: bool) -> None:
    """The MEAN parameters are those ``means()`` (the weights of MEAN mode) depends on: a random
    linear function of the means has a gradient in every MEAN parameter and in no other."""
    layer = make(name, conv=conv)
    weight, bias = layer.means()
    parameters = list(layer.parameters())
    probe = sum((t * torch.randn_like(t)).sum() for t in (weight, bias) if t is not None)
    gradients = torch.autograd.grad(probe, parameters, allow_unused=True)
    reads = {id(p) for p, g in zip(parameters, gradients, strict=True) if g is not None and g.any()}
    assert {id(p) for p in parameters_with_role(layer, ParameterRole.MEAN)} == reads
    assert reads  # every family has a mean network (a bias at least)


def test_full_covariance_samples_match_its_exact_output_moments() -> None:
    layer = make("fc")
    x = inputs()[:, :2]
    draws = 20_000
    generators = ModelGenerators([21, 22, 23])
    with torch.no_grad():
        sampled = torch.stack([layer(x, ForwardMode.LOCAL, generators) for _ in range(draws)])
        mean, var = layer.output_moments(x)
    assert torch.all((sampled.mean(0) - mean).abs() < 5 * (var / draws).sqrt())
    assert torch.all((sampled.var(0) - var).abs() < 5 * var * math.sqrt(2 / draws))


def test_diagonal_families_kl_is_the_closed_form_of_their_marginals() -> None:
    for name in ("mf", "gd"):
        layer = make(name)
        prior = GaussianPrior(0.7)
        (weight_mean, bias_mean), (weight_std, bias_std) = (
            layer.posterior_mean(),
            layer.posterior_std(),
        )
        expected = kl_diagonal_gaussian(weight_mean, weight_std, 0.7) + kl_diagonal_gaussian(
            bias_mean, bias_std, 0.7
        )
        torch.testing.assert_close(layer.kl(prior), expected)


def test_full_covariance_kl_matches_torch_distributions() -> None:
    layer = make("fc")
    expected = torch.stack(
        [
            kl_divergence(
                MultivariateNormal(layer.mean[m].flatten(), scale_tril=layer.scale_tril()[m]),
                MultivariateNormal(
                    torch.zeros(layer.dim, dtype=torch.float64), 0.49 * torch.eye(layer.dim)
                ),
            )
            for m in range(MODELS)
        ]
    )
    torch.testing.assert_close(layer.kl(GaussianPrior(0.7)), expected.detach())


def test_full_covariance_restricted_to_a_diagonal_equals_mean_field() -> None:
    """FC with L = diag(sigma) has MF's KL, output moments and (same noise) weight samples."""
    generators = ModelGenerators([5, 6, 7])
    mean_field = MeanField(INPUTS, OUTPUTS, generators, 0.2, torch.float64)
    full = FullCovariance(INPUTS, OUTPUTS, ModelGenerators([5, 6, 7]), 0.2, torch.float64)
    with torch.no_grad():
        mean_field.weight_log_std.uniform_(-2.0, 0.0)
        mean_field.bias_log_std.uniform_(-2.0, 0.0)
        torch.testing.assert_close(full.mean[:, :-1], mean_field.weight_mean)
        log_std = torch.cat([mean_field.weight_log_std, mean_field.bias_log_std.unsqueeze(1)], 1)
        full.scale_log_diagonal.copy_(log_std.flatten(1))
    prior = GaussianPrior(1.5)
    torch.testing.assert_close(full.kl(prior), mean_field.kl(prior))
    x = inputs()
    weight_std, bias_std = mean_field.posterior_std()
    expected = local_reparameterization_moments(
        x, mean_field.weight_mean, weight_std**2, mean_field.bias_mean, bias_std**2
    )
    for got, want in zip(full.output_moments(x), expected, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(
        full(x, ForwardMode.WEIGHTS, ModelGenerators([1, 2, 3])),
        mean_field(x, ForwardMode.WEIGHTS, ModelGenerators([1, 2, 3])),
    )


def test_mean_field_with_vanishing_std_is_the_point_network() -> None:
    mean_field = MeanField(INPUTS, OUTPUTS, ModelGenerators([4, 5, 6]), 1e-12, torch.float64)
    point = Point(INPUTS, OUTPUTS, ModelGenerators([4, 5, 6]), dtype=torch.float64)
    x = inputs()
    for forward_mode in set(ForwardMode) - {ForwardMode.ZERO_MEAN}:  # zero-mean drops the means
        torch.testing.assert_close(
            mean_field(x, forward_mode, ModelGenerators([1, 2, 3])), point(x), atol=1e-9, rtol=0
        )


def test_wrong_input_shape_is_named() -> None:
    layer = make("mf")
    with pytest.raises(ValueError, match=r"expected \(M=3, N, 4\)"):
        layer(torch.randn(3, 5, 7, dtype=torch.float64), ForwardMode.MEAN)
    single = make("mf", generators=None)
    with pytest.raises(ValueError, match=r"expected \(\*, 4\)"):
        single(torch.randn(3, 5, 7, dtype=torch.float64))
    rows = torch.randn(3, 5, 4, dtype=torch.float64)  # (*, I) as nn.Linear: rows are examples
    torch.testing.assert_close(
        single(rows, "mean"), single(rows.reshape(15, 4), "mean").view(3, 5, 2)
    )
    conv = make("vd-layer", conv=True, generators=None)
    with pytest.raises(ValueError, match=r"expected \(N, 2, H, W\)"):
        conv(torch.randn(5, 3, 6, 6, dtype=torch.float64))


def test_full_covariance_convolution_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="dense only"):
        FullCovariance(2, 3, kernel_size=3)


def test_unknown_family_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="choose from mf, gd, fc"):
        family("mean-field")


def test_point_layer_has_zero_kl() -> None:
    kl = Point(2, 2, ModelGenerators([0, 1]), dtype=torch.float64).kl(GaussianPrior())
    assert kl.dtype == torch.float64
    torch.testing.assert_close(kl, torch.zeros(2, dtype=torch.float64), atol=0, rtol=0)


@pytest.mark.parametrize(
    ("name", "option"), [("point", "init_std"), ("vd-layer", "init_std"), ("dropout", "init_std"),
                         ("mf", "log_alpha"), ("mf", "std"), ("gd", "init_std")]
)  # fmt: skip
def test_an_option_the_family_does_not_take_is_named(name: str, option: str) -> None:
    with pytest.raises(ValueError, match=f"family '{name}' takes no option \\['{option}'\\]"):
        FAMILIES[name].build(2, 3, **{option: 0.1})


def test_one_std_is_the_fixed_std_of_gd_and_the_initial_std_of_a_learned_variance() -> None:
    learned = {"mf", "fc", "fc-low-rank", "additive", "zero-mean", "bernoulli-variance",
               "uniform-variance"}  # fmt: skip
    assert {name for name, spec in FAMILIES.items() if spec.std_option() == "std"} == {"gd"}
    for name, spec in FAMILIES.items():
        takes = spec.std_option() in spec.accepted_options()
        assert takes == (name in learned | {"gd"}), name
    for name in ("mf", "gd", "fc"):
        spec = FAMILIES[name]
        layer = spec.build(2, 3, dtype=torch.float64, **{spec.std_option(): 0.3})
        for std in layer.posterior_std():
            torch.testing.assert_close(std, torch.full_like(std, 0.3))


def test_variational_dropout_takes_its_initial_log_alpha() -> None:
    layer = FAMILIES["vd-weight"].build(2, 3, log_alpha=-2.5)
    torch.testing.assert_close(layer.log_alpha, torch.full((1, 2, 3), -2.5), atol=0, rtol=0)
