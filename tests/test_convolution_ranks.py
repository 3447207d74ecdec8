"""1-D and 3-D convolutions of every convolutional family: the mean against torch's own ConvNd,
LRT moments against explicit weight samples, the arguments as torch takes them."""

from __future__ import annotations

import pytest
import torch
from test_family_contract import CONV, MODELS, assert_same_moments, inputs, make
from torch.nn import functional

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.operators import Operator

RANKS = (1, 3)
CONV_RANKS = [(name, rank) for name in CONV for rank in RANKS]
CONV_IDS = [f"{name}-conv{rank}d" for name, rank in CONV_RANKS]
# stride, padding and dilation of each rank's test layer, none of them trivial
GEOMETRY = {1: {"stride": 2, "padding": 2, "dilation": 2},
            3: {"stride": (1, 2, 1), "padding": (1, 0, 1), "dilation": (1, 1, 2)}}  # fmt: skip
WITHOUT_MEANS = ("zero-mean", "bernoulli-variance", "uniform-variance")  # weights not loaded
WITH_MEANS = [name for name in CONV if name not in WITHOUT_MEANS]


def torch_convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, rank: int):
    """The convolution of each model's input with its weight by torch's own ConvNd function."""
    convolve = {1: functional.conv1d, 3: functional.conv3d}[rank]
    return torch.stack(
        [convolve(x[m], weight[m], bias[m], **GEOMETRY[rank]) for m in range(len(x))]
    )


@pytest.mark.parametrize(("name", "rank"), CONV_RANKS, ids=CONV_IDS)
def test_mean_mode_is_torch_convolution_with_stride_padding_dilation(name: str, rank: int):
    layer = make(name, conv=True, rank=rank, **GEOMETRY[rank])
    x = inputs(conv=True, rank=rank)
    weight, bias = layer.posterior_mean()
    assert weight.shape == (MODELS, 2, 2, *(3,) * rank)
    expected = torch_convolution(x, weight, bias, rank)
    torch.testing.assert_close(layer(x, ForwardMode.MEAN), expected)
    assert layer(x, ForwardMode.LOCAL).shape == expected.shape
    assert f"conv{rank}d" in repr(layer)


@pytest.mark.parametrize(("name", "rank"), CONV_RANKS, ids=CONV_IDS)
def test_sample_moments_match_explicit_weight_samples(name: str, rank: int) -> None:
    """LOCAL (LRT where it applies) and WEIGHTS (one explicit weight sample per draw) give one
    per-example, per-position marginal, as the contract test checks for conv2d."""
    layer = make(name, conv=True, rank=rank, **GEOMETRY[rank])
    x = inputs(conv=True, rows=2, rank=rank)
    generators = ModelGenerators([11, 12, 13])
    # the tolerances follow the draws (5 standard errors); 500 of them still flag a variance off
    # by a factor 2 (5 standard errors of a variance difference are 45% of it here)
    draws = 500
    with torch.no_grad():
        sampled = torch.stack([layer(x, ForwardMode.LOCAL, generators) for _ in range(draws)])
        weights = torch.stack([layer(x, ForwardMode.WEIGHTS, generators) for _ in range(draws)])
    assert_same_moments(sampled, weights)


@pytest.mark.parametrize("rank", RANKS)
def test_a_single_model_equals_the_one_model_stack(rank: int) -> None:
    stack = make("mf", conv=True, rank=rank, generators=ModelGenerators([4]), **GEOMETRY[rank])
    single = make("mf", conv=True, rank=rank, generators=None, **GEOMETRY[rank])
    single.load_state_dict(stack.state_dict())
    x = inputs(conv=True, models=None, rank=rank)
    for mode in ForwardMode:
        torch.testing.assert_close(
            single(x, mode, ModelGenerators([5])), stack(x[None], mode, ModelGenerators([5]))[0]
        )


def test_neuron_dropout_shares_one_alpha_per_output_channel_at_every_rank() -> None:
    for rank in (1, 2, 3):
        layer = make("vd-neuron", conv=True, rank=rank)
        assert layer.log_alpha.shape == (MODELS, 2, 1, *(1,) * rank)


def test_same_padding_is_torch_same_padding() -> None:
    layer = make("mf", conv=True, rank=1, padding="same", dilation=2)
    x = inputs(conv=True, rank=1)
    weight, bias = layer.posterior_mean()
    expected = torch.stack(
        [functional.conv1d(x[m], weight[m], bias[m], padding="same", dilation=2) for m in range(3)]
    )
    torch.testing.assert_close(layer(x, "mean"), expected)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"kernel_size": (3, 3, 3, 3)}, "kernel_size must be an int or a tuple of 1, 2 or 3"),
        ({"kernel_size": (3,), "stride": (1, 2)}, r"stride must be an int or a tuple of 1 ints"),
        ({"kernel_size": (3, 3, 3), "dilation": (1, 1)}, "dilation must be .* tuple of 3 ints"),
        ({"kernel_size": 3, "padding": "full"}, "padding must be 'valid', 'same' or ints"),
        ({"kernel_size": (3,), "padding": "same", "stride": 2}, "padding='same' needs stride 1"),
        ({"kernel_size": (3, 0)}, r"kernel_size must be >= 1, got \(3, 0\)"),
        ({"kernel_size": (3,), "padding": -1}, r"padding must be >= 0, got \(-1,\)"),
        ({"stride": 2}, "stride, padding, dilation, transposed and output_padding apply to conv"),
    ],
)
def test_bad_convolution_arguments_are_named(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Operator(2, 3, **arguments)
