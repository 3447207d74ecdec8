"""Each layer's training estimator: LOCAL for dense layers, one weight draw a batch for
(transposed) convolutions, chosen in one place and settable per layer; the objectives use it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vbnn
from vbnn.core.contracts import ForwardMode
from vbnn.layers.shell import TRAINING_ESTIMATORS, default_training_mode


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.ConvTranspose2d(4, 2, 3), nn.Flatten(),
        nn.Linear(2 * 8 * 8, 3),
    )  # fmt: skip


def test_default_estimator_is_the_lrt_for_dense_layers_one_draw_for_convolutions():
    model = vbnn.convert(small_cnn(), "mf")
    modes = [layer.training_mode for layer in vbnn.variational_layers(model)]
    assert modes == [ForwardMode.WEIGHTS, ForwardMode.WEIGHTS, ForwardMode.LOCAL]
    for layer in vbnn.variational_layers(model):
        assert layer.training_mode is default_training_mode(layer.operator)


@pytest.mark.parametrize("family", ["mf", "vd-weight", "gd"])
def test_a_convolution_in_training_shares_one_draw_a_dense_layer_draws_per_example(family):
    """The same image ten times: one weight draw gives ten equal outputs; the LRT gives ten
    different ones (their spread is the marginal std, far above rounding)."""
    option = {"gd": {"std": 0.3}, "vd-weight": {}}.get(family, {"init_std": 0.3})
    conv = vbnn.convert(nn.Conv2d(1, 3, 3), family, **option).train()
    dense = vbnn.convert(nn.Linear(6, 3), family, **option).train()
    torch.manual_seed(1)
    image, row = torch.randn(1, 1, 5, 5), torch.randn(1, 6)
    conv_out = conv(image.expand(10, -1, -1, -1))
    dense_out = dense(row.expand(10, -1))
    assert torch.equal(conv_out, conv_out[:1].expand_as(conv_out))
    assert dense_out.std(0).min() > 1e-3
    conv.training_mode = "local"  # the per-layer switch
    local_out = conv(image.expand(10, -1, -1, -1))
    assert local_out.std(0).min() > 1e-3


def test_the_objectives_draw_with_each_layers_estimator(monkeypatch):
    """``vbnn.elbo`` reaches a convolution's LRT only when the layer is told to train with it;
    the dense layer always uses its LRT."""
    model = vbnn.convert(small_cnn(), "mf").train()
    layers = vbnn.variational_layers(model)
    x, y = torch.randn(5, 1, 8, 8), torch.tensor([0, 1, 2, 0, 1])
    likelihood = vbnn.CategoricalLikelihood()
    called: list[int] = []
    for index, layer in enumerate(layers):
        original = layer.local_reparameterization

        def spy(inputs, noise, index=index, original=original):
            called.append(index)
            return original(inputs, noise)

        monkeypatch.setattr(layer, "local_reparameterization", spy)
    vbnn.elbo(model, likelihood, None, x, y, dataset_size=50)
    assert called == [2]
    called.clear()
    for layer in layers:
        layer.training_mode = ForwardMode.LOCAL
    with vbnn.mode(model, "weights"):  # a forced mode does not reach inside the objective
        vbnn.elbo(model, likelihood, None, x, y, dataset_size=50)
    assert called == [0, 1, 2]


def test_convert_passes_the_estimator_and_bad_ones_are_refused():
    model = vbnn.convert(small_cnn(), "mf", training_mode="local")
    assert {layer.training_mode for layer in vbnn.variational_layers(model)} == {ForwardMode.LOCAL}
    assert set(TRAINING_ESTIMATORS) == {ForwardMode.LOCAL, ForwardMode.WEIGHTS}
    layer = vbnn.variational_layers(model)[0]
    with pytest.raises(ValueError, match=r"training_mode must be one of \['local', 'weights'\]"):
        layer.training_mode = "mean"
    with pytest.raises(ValueError, match="'sideways' is not a valid ForwardMode"):
        layer.training_mode = "sideways"


def test_eval_mode_is_the_mean_and_a_forced_training_mode_is_the_estimator():
    layer = vbnn.convert(nn.Conv2d(1, 2, 3), "mf", init_std=0.3)
    assert layer.eval().resolve_mode(None) is ForwardMode.MEAN
    assert layer.train().resolve_mode(None) is ForwardMode.WEIGHTS
    with vbnn.mode(layer, "training"):
        assert layer.resolve_mode(None) is ForwardMode.WEIGHTS
        assert layer.resolve_mode("local") is ForwardMode.LOCAL  # an explicit mode wins
