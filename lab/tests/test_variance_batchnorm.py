"""The BatchNorm diagnostic of the variance-networks reproduction: each of its three predictions
is the network it claims to be."""

from __future__ import annotations

import pytest
import torch

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import as_input
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn_lab.variance_networks.batchnorm import (
    DENSE1,
    batchnorm_diagnostic,
    mean_accuracy,
)


def trained_like(batch_norm: bool = True) -> LeNet5:
    """A LeNet-5 of one model whose BatchNorm has running statistics unlike the test batch's (a
    running variance 400x the spread of the mean pre-activations, as after a phase transition)."""
    torch.manual_seed(0)
    model = LeNet5(LeNetConfig(families=("vd-layer",) * 4, batch_norm=batch_norm),
                   ModelGenerators.for_keys(0, [0], "init"))  # fmt: skip
    if batch_norm:
        with torch.no_grad():
            model.norm.weight.uniform_(0.5, 2.0)
            model.norm.bias.uniform_(-0.5, 0.5)
            model.norm.running_var.fill_(400.0)
            model.norm.running_mean.normal_()
    return model.eval()


def test_three_predictions_are_the_networks_they_name() -> None:
    images = torch.rand(96, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    model = trained_like()
    with torch.no_grad():
        logits = model(as_input(model, images), ForwardMode.MEAN)[0]
    labels = logits.argmax(-1)  # the labels that mean propagation gets right by construction
    result = batchnorm_diagnostic(model, images, labels)
    assert result["running"] == 100.0
    # "no norm" is the same weights in a LeNet-5 built without BatchNorm
    plain = trained_like(batch_norm=False)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("norm.")}
    plain.load_state_dict(state)
    assert result["no norm"] == mean_accuracy(plain, images, labels)
    # "own batch" is BatchNorm whose running statistics are the batch's own (biased variance)
    with torch.no_grad():
        hidden = model.input_of(DENSE1, as_input(model, images), ForwardMode.MEAN)
        pre = model.layers[DENSE1](hidden, ForwardMode.MEAN)[0]
        model.norm.running_mean.copy_(pre.mean(0))
        model.norm.running_var.copy_(pre.var(0, unbiased=False))
    assert result["own batch"] == mean_accuracy(model, images, labels)
    # the scales: the running std was set to 20, the spread is the pre-activations' own
    assert result["running std"] == pytest.approx((400.0 + model.norm.eps) ** 0.5)
    assert result["mean pre-activation std"] == pytest.approx(float(pre.std(0).median()))
    # and the diagnostic leaves the model as it found it (eval mode, its BatchNorm in place)
    assert not model.training and model.norm is not None


def test_a_network_without_batchnorm_is_refused() -> None:
    with pytest.raises(ValueError, match="no BatchNorm"):
        batchnorm_diagnostic(trained_like(batch_norm=False), torch.rand(4, 1, 28, 28),
                             torch.zeros(4, dtype=torch.long))  # fmt: skip
