"""Per-layer pruning of deeper MLPs: hand-built networks whose pruned units are known."""

from __future__ import annotations

import math

import pytest
import torch
from test_pruning import PRIOR_STD, PRUNED, hand_built_mean_field

from vbnn.core.contracts import Activation
from vbnn.core.randomness import ModelGenerators
from vbnn.diagnostics.layer_pruning import count_pruned_per_layer, pruned_units_per_layer
from vbnn.diagnostics.pruning import diagnose_units, pruned_units
from vbnn.layers import MeanField
from vbnn.networks.mlp import MLP


def set_at_prior(layer: MeanField, unit: int) -> None:
    """Incoming weights and bias of ``unit`` exactly at N(0, PRIOR_STD^2)."""
    layer.weight_mean[:, :, unit] = 0.0
    layer.bias_mean[:, unit] = 0.0
    layer.weight_log_std[:, :, unit] = math.log(PRIOR_STD)
    layer.bias_log_std[:, unit] = math.log(PRIOR_STD)


def two_hidden_layers() -> MLP:
    """3 -> 4 -> 3 -> 1, two models; the pruned units of each layer are set by hand.

    Layer 1: unit 0 pruned (at the prior, outgoing weights zero); unit 1 at the prior but one
    outgoing weight confidently non-zero (kept); unit 2 outgoing zero but incoming learned (kept).
    Layer 2: unit 1 pruned in model 0 only (model 1 gives its output weight SNR 10).
    """
    model = MLP(MeanField, (3, 4, 3, 1), Activation.TANH, ModelGenerators([0, 1]))
    first, second, output = model.layers
    with torch.no_grad():
        for layer in model.layers:
            layer.weight_mean.fill_(0.8)
            layer.bias_mean.fill_(0.3)
            layer.weight_log_std.fill_(math.log(0.05))
            layer.bias_log_std.fill_(math.log(0.05))
        for unit in (0, 1):
            set_at_prior(first, unit)
        second.weight_mean[:, 0, :] = 0.001  # unit 0 -> every unit of layer 2: zero
        second.weight_mean[:, 1, :] = 0.001
        second.weight_mean[:, 1, 2] = 0.9  # unit 1 still drives unit 2 of layer 2
        second.weight_mean[:, 2, :] = 0.0  # unit 2: outgoing zero, incoming learned
        set_at_prior(second, 1)
        output.weight_mean[:, 1, 0] = torch.tensor([0.002, 0.5])
    return model


def test_counts_per_layer_and_per_model_on_a_hand_built_network() -> None:
    model = two_hidden_layers()
    first, second = pruned_units_per_layer(model, PRIOR_STD)
    assert first.tolist() == [[True, False, False, False]] * 2
    assert second.tolist() == [[False, True, False], [False, False, False]]
    assert count_pruned_per_layer(model, PRIOR_STD).tolist() == [[1, 1], [1, 0]]
    # the prior the KL refers to matters: against N(0, 1) no incoming weight sits at the prior
    assert count_pruned_per_layer(model, 1.0).sum() == 0
    # one prior std per model
    per_model = torch.tensor([PRIOR_STD, 1.0])
    assert count_pruned_per_layer(model, per_model).tolist() == [[1, 1], [0, 0]]


def test_one_hidden_layer_agrees_with_the_single_layer_rule() -> None:
    model = hand_built_mean_field()
    x = torch.randn(1, 20, 3, generator=torch.Generator().manual_seed(1))
    expected = pruned_units(diagnose_units(model, x, PRIOR_STD))
    (per_layer,) = pruned_units_per_layer(model, PRIOR_STD)
    assert torch.equal(per_layer, expected)
    assert per_layer[0].nonzero().flatten().tolist() == PRUNED


def test_bad_input_is_named() -> None:
    model = two_hidden_layers()
    with pytest.raises(ValueError, match="prior_std"):
        pruned_units_per_layer(model, torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="thresholds"):
        pruned_units_per_layer(model, 1.0, snr_threshold=0.0)
    with pytest.raises(ValueError, match="no hidden layer"):
        pruned_units_per_layer(MLP(MeanField, (3, 1), Activation.TANH, ModelGenerators([0])), 1.0)
