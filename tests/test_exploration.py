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
from vbnn.core.randomness import ModelGenerators
from vbnn.experiments.exploration.policy import EpisodeNoise, Policy, PolicyNoise
from vbnn.experiments.exploration.reinforce import (
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


def test_episode_noise_replays_its_draws_until_a_new_episode():
    noise = EpisodeNoise(ModelGenerators([1, 2]))
    noise.new_episode()
    first = [noise.randn(3, 4), noise.randn(5)]
    noise.start_pass()
    torch.testing.assert_close(noise.randn(3, 4), first[0])
    torch.testing.assert_close(noise.randn(5), first[1])
    noise.new_episode()
    assert not torch.allclose(noise.randn(3, 4), first[0])
    noise.start_pass()
    with pytest.raises(RuntimeError, match=r"asked for \(5,\) at draw 0"):
        noise.randn(5)


@pytest.mark.parametrize("kind", list(PolicyNoise))
def test_fast_policy_path_equals_the_layers_own_forward(kind):
    policy = Policy(4, 2, kind, ModelGenerators.for_keys(0, range(3), "init"))
    noise = EpisodeNoise(ModelGenerators.for_keys(0, range(3), "train"))
    noise.new_episode()
    x = torch.randn(3, 7, 4)
    with torch.no_grad():
        fast = policy.logits(x, policy.weights(noise))
        torch.testing.assert_close(policy(x, noise), fast)
        torch.testing.assert_close(policy.logits(x, policy.weights(noise)), fast)  # replayed


def test_variance_layer_draws_are_zero_mean_with_the_layer_std():
    policy = Policy(4, 2, PolicyNoise.VARIANCE, ModelGenerators([0]))
    noise = EpisodeNoise(ModelGenerators([1]))
    layer = policy.layers[1]
    std = layer.weight_log_std.exp()
    with torch.no_grad():
        noise.new_episode()
        standardised = policy.weights(noise)[1][0] / std
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
    from vbnn.experiments.exploration.diagnostic import noise_and_signal

    states = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    draws, across_states = noise_and_signal(PolicyNoise.DETERMINISTIC, states, draws=5)
    policy = Policy(4, 2, PolicyNoise.DETERMINISTIC, ModelGenerators.for_keys(0, [0], "init"))
    with torch.no_grad():
        by_hand = torch.softmax(policy(states[None], EpisodeNoise(ModelGenerators([0]))), -1)
    assert draws == 0.0
    assert across_states == pytest.approx(by_hand[0, :, 0].double().std(correction=0).item())
    noisy, _ = noise_and_signal(PolicyNoise.VARIANCE, states, draws=5)
    assert noisy > 0.0
