"""Over-pruning rule on hand-built networks whose pruned units are known."""

from __future__ import annotations

import math

import pytest
import torch

from vbnn.core.contracts import Activation
from vbnn.core.gaussian import kl_diagonal_gaussian
from vbnn.core.randomness import ModelGenerators
from vbnn.diagnostics.pruning import count_pruned, diagnose_units, kl_per_weight, pruned_units
from vbnn.layers import FixedVariance, FullCovariance, MeanField
from vbnn.networks.mlp import MLP

PRIOR_STD = 0.7
PRUNED = [1, 3, 4, 5]
# Unit 0: output near 0 but incoming weights learned (not at the prior): NOT pruned.
# Unit 5: incoming weights at the prior, output mean 0 but uncertain (std 0.5): pruned, except
#   under the strict "confidently near zero" option (output_tolerance).
# Unit 6: incoming weights at the prior, output weight 0.05 with std 0.01 (SNR 5): NOT pruned.


def hand_built_mean_field() -> MLP:
    """3 inputs -> 7 tanh units -> 1 output, one model, parameters set by hand."""
    model = MLP(MeanField, (3, 7, 1), Activation.TANH, ModelGenerators([0]))
    hidden, output = model.layers
    with torch.no_grad():
        hidden.weight_mean.copy_(torch.tensor([[1.0, -0.8, 0.5]]).T.expand(3, 7).unsqueeze(0))
        hidden.weight_log_std.fill_(math.log(0.1))
        hidden.bias_log_std.fill_(math.log(0.1))
        hidden.bias_mean.fill_(0.2)
        for j in [*PRUNED, 6]:  # incoming weights and bias exactly at the prior N(0, 0.7^2)
            hidden.weight_mean[0, :, j] = 0.0
            hidden.bias_mean[0, j] = 0.0
            hidden.weight_log_std[0, :, j] = math.log(PRIOR_STD)
            hidden.bias_log_std[0, j] = math.log(PRIOR_STD)
        output.weight_mean[0, :, 0] = torch.tensor([0.003, 0.004, 1.2, -0.002, 0.0, 0.0, 0.05])
        output.weight_log_std.fill_(math.log(0.01))
        output.weight_log_std[0, 5, 0] = math.log(0.5)
    return model


def test_per_weight_kl_sums_to_the_diagonal_kl() -> None:
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(2, 4, 3, generator=generator)
    std = torch.rand(2, 4, 3, generator=generator) + 0.1
    torch.testing.assert_close(
        kl_per_weight(mean, std, 1.3).sum((1, 2)), kl_diagonal_gaussian(mean, std, 1.3)
    )
    assert float(kl_per_weight(torch.zeros(1), torch.full((1,), 1.3), 1.3)) == 0.0


def test_rule_finds_exactly_the_constructed_pruned_units() -> None:
    model = hand_built_mean_field()
    x = torch.randn(1, 50, 3, generator=torch.Generator().manual_seed(1))
    diagnostics = diagnose_units(model, x, PRIOR_STD, ModelGenerators([2]), samples=25)
    pruned = pruned_units(diagnostics)[0]
    assert pruned.nonzero().flatten().tolist() == PRUNED
    assert int(count_pruned(diagnostics)[0]) == len(PRUNED)
    # Units whose incoming weights sit at the prior have KL 0 and a constant mean activation
    # tanh(0) = 0, but activations spread out under weights drawn from the prior.
    assert torch.allclose(diagnostics.max_incoming_kl[0, [*PRUNED, 6]], torch.zeros(5), atol=1e-6)
    assert torch.all(diagnostics.activation_spread[0, PRUNED] == 0)
    assert torch.all(diagnostics.activation_spread[0, [0, 2]] > 0.3)
    assert diagnostics.sampled_activations.shape == (25, 1, 50, 7)
    assert torch.all(diagnostics.sampled_activations[:, 0, :, PRUNED].std() > 0.3)
    frame = diagnostics.frame()
    assert frame["pruned"].tolist() == [j in PRUNED for j in range(7)]
    # The thresholds are real. Strict wording: |v| + 2 sd < 0.023 drops unit 5 (1.0) and unit 1
    # (0.024); an SNR threshold of 0.25 drops unit 1 (SNR 0.4); a KL threshold
    # above unit 0's largest incoming KL prunes it as well.
    strict = pruned_units(diagnostics, output_tolerance=0.023)[0]
    assert strict.nonzero().flatten().tolist() == [3, 4]
    assert pruned_units(diagnostics, snr_threshold=0.25)[0].nonzero().flatten().tolist() == [
        3,
        4,
        5,
    ]
    loose = float(diagnostics.max_incoming_kl[0, 0]) + 0.01
    assert pruned_units(diagnostics, kl_threshold=loose)[0].nonzero().flatten().tolist() == [
        0, 1, 3, 4, 5
    ]  # fmt: skip


def test_full_covariance_restricted_to_a_diagonal_gives_the_mean_field_diagnostics() -> None:
    mean_field = hand_built_mean_field()
    full = MLP(FullCovariance, (3, 7, 1), Activation.TANH, ModelGenerators([0]))
    with torch.no_grad():
        for source, target in zip(mean_field.layers, full.layers, strict=True):
            target.mean.copy_(torch.cat([source.weight_mean, source.bias_mean.unsqueeze(1)], 1))
            log_std = torch.cat([source.weight_log_std, source.bias_log_std.unsqueeze(1)], 1)
            target.scale_log_diagonal.copy_(log_std.flatten(1))
    x = torch.randn(1, 30, 3, generator=torch.Generator().manual_seed(4))
    expected = diagnose_units(mean_field, x, PRIOR_STD)
    got = diagnose_units(full, x, PRIOR_STD)
    torch.testing.assert_close(got.incoming_kl, expected.incoming_kl)
    torch.testing.assert_close(got.output_std, expected.output_std)
    assert pruned_units(got)[0].nonzero().flatten().tolist() == PRUNED


def test_fixed_variance_units_are_never_pruned_and_bad_input_is_named() -> None:
    model = MLP(FixedVariance, (3, 5, 1), Activation.TANH, ModelGenerators([0, 1]), std=0.05)
    with torch.no_grad():
        model.layers[0].weight_mean.zero_()
        model.layers[1].weight_mean.zero_()
    diagnostics = diagnose_units(model, torch.randn(2, 10, 3), 1.0)
    assert count_pruned(diagnostics).tolist() == [0, 0]  # std 0.05 != prior std: KL > 0.05
    with pytest.raises(ValueError, match=r"expected \(M=2, N, I=3\)"):
        diagnose_units(model, torch.randn(2, 10, 4), 1.0)
    deep = MLP(MeanField, (3, 4, 4, 1), Activation.TANH, ModelGenerators([0]))
    with pytest.raises(ValueError, match="one hidden layer"):
        diagnose_units(deep, torch.randn(1, 10, 3), 1.0)
    with pytest.raises(ValueError, match="thresholds must be > 0"):
        pruned_units(diagnostics, kl_threshold=0.0)
