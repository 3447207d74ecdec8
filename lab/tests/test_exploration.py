"""REINFORCE with per-episode parameter noise (Neklyudov et al. 2019 section 6.2): returns, the
replayed noise, the fast policy path against the layers' own forward, a stack against one model, a
tiny run."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from vbnn.cli import main
from vbnn.core.randomness import ModelGenerators, NoiseTape
from vbnn_lab.exploration.policy import Policy, PolicyNoise
from vbnn_lab.exploration.reinforce import (
    Baseline,
    Environment,
    ReinforceConfig,
    RunningBaseline,
    normalised_returns,
    run_episodes,
)


def test_normalised_returns_match_the_discounted_sums():
    # rewards 1, 1, 1 with gamma 0.5: G = (1.75, 1.5, 1)
    returns = np.array([1.75, 1.5, 1.0])
    expected = (returns - returns.mean()) / returns.std()
    np.testing.assert_allclose(normalised_returns(np.ones(3), 0.5), expected, rtol=1e-6)


def test_running_baseline_by_hand():
    baseline = RunningBaseline(discount=0.5, decay=0.9)
    # first episode, rewards 1, 1, 1: G = (1.75, 1.5, 1), nothing earlier: advantage 0
    np.testing.assert_array_equal(baseline.advantages(np.ones(3)), np.zeros(3))
    # second, rewards 2, 0 (G = 2, 0) against b = (1.75, 1.5): residual (0.25, -1.5),
    # s^2 = 0.9 * 0 + 0.1 * mean(0.25^2, 1.5^2)
    scale = math.sqrt(0.1 * (0.25**2 + 1.5**2) / 2)
    np.testing.assert_allclose(baseline.advantages(np.array([2.0, 0.0])),
                               np.array([0.25, -1.5]) / scale, rtol=1e-6)  # fmt: skip
    # b is now (0.9 * 1.75 + 0.1 * 2, 0.9 * 1.5 + 0, 1): a third episode of length 4 is compared
    # with it on its first three steps, and its fourth step (never seen) gets advantage 0
    returns = np.array([1.875, 1.75, 1.5, 1.0])
    expected = returns - np.array([1.775, 1.35, 1.0, 1.0])
    scale = math.sqrt(0.9 * scale**2 + 0.1 * np.mean(expected**2))
    np.testing.assert_allclose(baseline.advantages(np.ones(4)), expected / scale, rtol=1e-6)


def test_running_baseline_ignores_an_episode_that_repeats_and_episode_baseline_does_not():
    # Acrobot's failing episode: 500 steps of -1. Normalising per episode gives it advantages that
    # rise with t; the running baseline, after the first, gives exactly 0.
    rewards = -np.ones(500)
    baseline = RunningBaseline(discount=0.99)
    for _ in range(3):
        advantages = baseline.advantages(rewards)
        np.testing.assert_allclose(advantages, 0.0, atol=1e-9)
    per_episode = normalised_returns(rewards, 0.99)
    assert (np.diff(per_episode) > 0).all() and per_episode[0] < -0.5 and per_episode[-1] > 2


def test_a_replayed_tape_hands_back_the_recorded_draws_in_order():
    source = ModelGenerators([1, 2])
    tape = NoiseTape(source=source)
    first = [tape.randn(3, 4), tape.randn(5)]
    expected = ModelGenerators([1, 2])
    torch.testing.assert_close(first, [expected.randn(3, 4), expected.randn(5)], rtol=0, atol=0)
    assert tape.calls == [((3, 4), torch.float32), ((5,), torch.float32)]
    for replay in (tape.replay(), tape.replay()):
        assert replay.randn(3, 4) is first[0] and replay.randn(5) is first[1]
    assert not torch.allclose(NoiseTape(source=source).randn(3, 4), first[0])  # a new episode
    with pytest.raises(RuntimeError, match=r"asked for \(5,\) at block 0, the tape holds \(3, 4\)"):
        tape.replay().randn(5)
    replay = tape.replay()
    replay.randn(3, 4)
    replay.randn(5)
    with pytest.raises(RuntimeError, match=r"asked for block 2 of \(5,\); the tape holds 2"):
        replay.randn(5)


@pytest.mark.parametrize("kind", list(PolicyNoise))
def test_fast_policy_path_equals_the_layers_own_forward(kind):
    policy = Policy(4, 2, kind, ModelGenerators.for_keys(0, range(3), "init"))
    tape = NoiseTape(source=ModelGenerators.for_keys(0, range(3), "train"))
    x = torch.randn(3, 7, 4)
    with torch.no_grad():
        fast = policy.logits(x, policy.weights(tape))
        torch.testing.assert_close(policy(x, tape.replay()), fast)
        torch.testing.assert_close(policy.logits(x, policy.weights(tape.replay())), fast)


def test_variance_layer_draws_are_zero_mean_with_the_layer_std():
    policy = Policy(4, 2, PolicyNoise.VARIANCE, ModelGenerators([0]))
    layer = policy.layers[1]
    std = layer.weight_log_std.exp()
    with torch.no_grad():
        standardised = policy.weights(ModelGenerators([1]))[1][0] / std
    count = standardised.numel()  # 65536 N(0, 1) draws: mean within 5 standard errors
    assert abs(float(standardised.mean())) < 5 / math.sqrt(count)
    assert abs(float(standardised.var()) - 1.0) < 5 * math.sqrt(2 / count)


def test_a_stack_of_two_trains_model_zero_as_alone():
    pytest.importorskip("gymnasium")
    config = ReinforceConfig(episodes=3)
    together, _ = run_episodes(Environment.CARTPOLE, PolicyNoise.VARIANCE, 2, config)
    alone, _ = run_episodes(Environment.CARTPOLE, PolicyNoise.VARIANCE, 1, config)
    np.testing.assert_array_equal(together[0], alone[0])
    assert together.shape == (2, 3) and (together >= 1).all() and (together <= 200).all()


def test_tiny_run_writes_its_files(tmp_path):
    pytest.importorskip("gymnasium")
    out = tmp_path / "out"
    argv = ["reproduce", "exploration", "--env", "cartpole", "--episodes", "2", "--seeds", "2",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    frame = pd.read_csv(out / "scores.csv")
    assert len(frame) == 3 * 2 * 2 and set(frame["policy"]) == {p.value for p in PolicyNoise}
    assert (out / "exploration.png").stat().st_size > 0
    assert json.loads((out / "run.json").read_text())["seeds"] == 2


def test_episode_baseline_run_is_stored_apart_from_the_default(tmp_path):
    pytest.importorskip("gymnasium")
    out = tmp_path / "out"
    argv = ["reproduce", "exploration", "--env", "cartpole", "--policy", "deterministic",
            "--episodes", "3", "--seeds", "1", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--baseline", "episode"]) == 0
    assert main(argv) == 0
    assert len(list((out / "runs").glob("*.json"))) == 2
    assert json.loads((out / "run.json").read_text())["config"]["baseline"] == "running"
    config = ReinforceConfig(episodes=3, baseline="episode")
    assert config.baseline is Baseline.EPISODE


def test_noise_and_signal_separates_draw_noise_from_state_signal():
    from vbnn_lab.exploration.diagnostic import noise_and_signal

    states = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    draws, across_states = noise_and_signal(PolicyNoise.DETERMINISTIC, states, draws=5)
    policy = Policy(4, 2, PolicyNoise.DETERMINISTIC, ModelGenerators.for_keys(0, [0], "init"))
    with torch.no_grad():
        by_hand = torch.softmax(policy(states[None], ModelGenerators([0])), -1)
    assert draws == 0.0
    assert across_states == pytest.approx(by_hand[0, :, 0].double().std(correction=0).item())
    noisy, _ = noise_and_signal(PolicyNoise.VARIANCE, states, draws=5)
    assert noisy > 0.0
