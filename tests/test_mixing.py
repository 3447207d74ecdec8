"""The mixing measures of ``vbnn.references.mixing`` against the network and known chains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pyro", reason="pip install 'vbnn[nuts]'")

from vbnn.references.architecture import MLPArchitecture
from vbnn.references.mixing import (
    divergence_episodes,
    divergence_locations,
    mixing_report,
    modes_or_drift,
    network_outputs,
    rescaling_coordinates,
    without_each_chain,
)

ARCHITECTURE = MLPArchitecture((2, 5, 4, 1), "leaky_relu", 0.2)


def flat(network: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in network.parameters()]).numpy()


def test_the_logits_are_the_torch_networks() -> None:
    """The flat layout (per layer weight (I, O) then bias) is the network's parameter order."""
    torch.manual_seed(0)
    network = ARCHITECTURE.torch_network()
    inputs = torch.randn(7, 2)
    logits, inactive = network_outputs(flat(network)[None, None], ARCHITECTURE, inputs.numpy())
    np.testing.assert_allclose(logits[0, 0], network(inputs[None])[0, :, 0].detach(), rtol=1e-5)
    assert inactive.shape == (1, 1, 9)


def test_a_rescaled_unit_moves_only_its_coordinate_and_not_the_function() -> None:
    """Hidden unit j's incoming weights and bias times c, outgoing times 1 / c: the logits stay,
    its rescaling coordinate moves by 2 log c, those of the other units of its layer stay (the
    next layer's move: their incoming weights include unit j's outgoing ones)."""
    rng = np.random.default_rng(1)
    theta = rng.standard_normal(44)
    moved, c = theta.copy(), 3.0
    # unit 2 of the first hidden layer: column 2 of W0 (2, 5), bias 2, row 2 of W1 (5, 4)
    moved[[2, 7]] *= c
    moved[10 + 2] *= c
    moved[15 + 8 : 15 + 12] /= c
    inputs = rng.standard_normal((50, 2))
    draws = np.stack([theta, moved])[None]
    logits, _ = network_outputs(draws, ARCHITECTURE, inputs)
    np.testing.assert_allclose(logits[0, 0], logits[0, 1], rtol=1e-4, atol=1e-5)
    before, after = rescaling_coordinates(draws, ARCHITECTURE.sizes)[0]
    expected = np.zeros(5)
    expected[2] = 2 * np.log(c)
    np.testing.assert_allclose((after - before)[:5], expected, atol=1e-12)


def test_a_unit_below_every_input_is_counted_inactive() -> None:
    rng = np.random.default_rng(2)
    theta = rng.standard_normal(44)
    theta[10 + 3] = -100.0  # bias of hidden unit 3 of the first layer
    inputs = rng.uniform(-1, 1, (40, 2))
    _, inactive = network_outputs(theta[None, None], ARCHITECTURE, inputs)
    assert inactive[0, 0, 3] and inactive[0, 0].sum() < 9


def test_modes_and_drift_are_told_apart() -> None:
    """Chains stuck at different means with steady halves: large spread, small drift. Chains
    that share a mean but wander (random walks): drift of the order of the spread."""
    rng = np.random.default_rng(3)
    noise = rng.standard_normal((4, 1000, 30))
    apart = noise + 5.0 * np.arange(4)[:, None, None]
    stuck = modes_or_drift(apart, np.ones(30))
    assert stuck["between_over_within"] > 3 and stuck["half_drift"] < 0.3
    walks = np.cumsum(noise, axis=1) / 30
    moving = modes_or_drift(walks, np.ones(30))
    assert moving["half_drift"] > 0.5
    mixed = modes_or_drift(noise, np.ones(30))
    assert mixed["between_over_within"] < 0.2 and mixed["half_drift"] < 0.2


def test_independent_chains_report_no_slow_coordinate() -> None:
    rng = np.random.default_rng(4)
    draws = rng.standard_normal((4, 400, 44)) * 0.5 + rng.standard_normal(44)
    summary, layers = mixing_report(draws, ARCHITECTURE, rng.standard_normal((30, 2)),
                                    rng.standard_normal((8, 2)))  # fmt: skip
    assert summary["slow_parameters"] == 0 and summary["rhat_max"] < 1.05
    assert summary["rescaling_ess_min"] > 300 and summary["logit_ess_min"] > 300
    assert sum(row["parameters"] for row in layers) == 44
    assert [(row["layer"], row["kind"]) for row in layers][:2] == [(0, "weight"), (0, "bias")]
    with pytest.raises(ValueError, match="sizes"):
        mixing_report(draws[..., :43], ARCHITECTURE, np.zeros((3, 2)), np.zeros((3, 2)))


def test_divergences_that_start_where_a_layer_is_large_are_found_there() -> None:
    """Independent draws; a transition diverges when the draw before it (its start) has a
    first-layer weight norm in the top 5 % of its chain: the starts sit at the 97.5th percentile
    of that norm (far outside the shifted null), not at the other layers' or the log density's.
    Marking the divergent draws themselves instead would look like no association at all."""
    rng = np.random.default_rng(5)
    draws = rng.standard_normal((4, 2000, 44))
    norm = np.sqrt((draws[..., :10] ** 2).sum(-1))
    top = norm > np.quantile(norm, 0.95, axis=1, keepdims=True)
    diverging = np.zeros_like(top)
    diverging[:, 1:] = top[:, :-1]
    rows = {
        row["feature"]: row
        for row in divergence_locations(
            draws, diverging, rng.standard_normal((4, 2000)), ARCHITECTURE.sizes, shifts=200
        )
    }
    first = rows["layer_0_log_norm"]
    assert first["divergent_starts"] == top[:, :-1].sum()
    assert abs(first["percentile"] - 0.975) < 0.003 and first["z"] > 20 and first["p"] == 0
    assert first["median_at_starts"] > first["median_all"]
    for name in ("layer_1_log_norm", "layer_2_log_norm", "log_density", "rescaling_max"):
        assert abs(rows[name]["z"]) < 4 and abs(rows[name]["null_mean"] - 0.5) < 0.01
    same_draw = divergence_locations(draws, top, np.zeros((4, 2000)), ARCHITECTURE.sizes, 200)
    assert abs(same_draw[1]["z"]) < 4  # layer 0 at the divergent draw, not at its start


def test_divergences_at_random_report_no_location() -> None:
    rng = np.random.default_rng(6)
    draws = np.cumsum(rng.standard_normal((4, 2000, 44)), axis=1) / 20  # autocorrelated
    diverging = rng.random((4, 2000)) < 0.01
    rows = divergence_locations(draws, diverging, rng.standard_normal((4, 2000)),
                                ARCHITECTURE.sizes, shifts=200)  # fmt: skip
    assert len(rows) == 5 and all(abs(row["z"]) < 4 for row in rows)
    assert divergence_locations(draws, np.zeros((4, 2000), bool), np.zeros((4, 2000)),
                                ARCHITECTURE.sizes) == []  # fmt: skip
    with pytest.raises(ValueError, match=r"diverging \(4, 1999\)"):
        divergence_locations(draws, diverging[:, 1:], np.zeros((4, 2000)), ARCHITECTURE.sizes)


def test_divergence_episodes_count_bursts() -> None:
    diverging = np.zeros((2, 200), bool)
    diverging[0, [3, 10, 25, 100]] = True  # 3-10-25 one burst (gaps <= 20), 100 another
    diverging[1, [150]] = True
    assert divergence_episodes(diverging) == 3
    assert divergence_episodes(diverging, gap=5) == 5  # every divergence its own burst


def test_leaving_out_the_chain_that_sits_apart_restores_r_hat() -> None:
    """Four chains of independent N(0, 1) draws, one of them shifted by one sd in 10 of its 50
    coordinates: only without that chain is every R-hat near 1 (the other rows keep it and the
    10 shifted coordinates: two of the six split halves one sd away, the variance of the halves'
    means 4/15 of the within-chain one, R-hat about sqrt(1 + 4/15) = 1.13)."""
    draws = np.random.default_rng(0).normal(size=(4, 1000, 50))
    draws[2, :, :10] += 1.0
    rows = without_each_chain(draws)
    assert [row["chain"] for row in rows] == [0, 1, 2, 3]
    assert rows[2]["rhat_max_without"] < 1.02 and rows[2]["rhat_slow_without"] == 0
    for row in rows[:2] + rows[3:]:
        assert row["rhat_max_without"] > 1.08 and row["rhat_slow_without"] >= 9
        assert row["rhat_median_without"] < 1.01  # 40 of the 50 coordinates agree
    with pytest.raises(ValueError, match=r"chains >= 2.*\(1, 1000, 50\)"):
        without_each_chain(draws[:1])
