"""REINFORCE (Williams 1992) for a stack of policies, one gymnasium environment per seed.

Neklyudov et al. 2019 section 6.2: a policy-gradient update after every episode, with its own
noise sample per episode, Adam. For model m and its episode (s_t, a_t, r_t), t < T_m,

    G_t = sum_{u >= t} gamma^(u - t) r_u,      loss_m = -sum_{t < T_m} A_t log pi_m(a_t | s_t, W_m),

with W_m the episode's weight draw and A_t from one of two baselines (the paper states none):

* ``episode``: A_t = (G_t - mean_t G) / (std_t G + 1e-8), G normalised over the episode's own
  steps, a common choice. It is not a baseline in Williams' sense: it depends on the episode
  itself, and an episode whose rewards carry no information (Acrobot's 500 steps of -1) still
  gets A_t rising with t, which moves the policy.
* ``running`` (the default): A_t = (G_t - b_t) / s, b_t an exponential moving average of G_t
  at step t over the model's earlier episodes and s that of the squared residual (floored at
  1e-6 of the largest |G_t|, ``RunningBaseline``): b is independent of the episode's actions, so
  subtracting it adds no bias (s, one positive number per episode, scales the step), and A is
  zero for an episode that repeats the earlier ones.

The M episodes run in lock-step (a finished one waits) and the losses of the M models are summed:
Adam acts elementwise, so each model trains exactly as it would alone. The score of an episode is
its undiscounted return, recorded as the policy acted (with its noise).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

from vbnn.core.randomness import ModelGenerators, NoiseTape, derive_seed
from vbnn.training.loop import train_loop
from vbnn_lab.exploration.policy import Policy, PolicyNoise


class Environment(str, Enum):
    """CartPole with 200-step episodes (CartPole-v0's limit) and Acrobot-v1 (500 steps)."""

    CARTPOLE = "cartpole"
    ACROBOT = "acrobot"


GYM_SETTINGS = {
    Environment.CARTPOLE: ("CartPole-v1", {"max_episode_steps": 200}),
    Environment.ACROBOT: ("Acrobot-v1", {}),
}


class Baseline(str, Enum):
    """How the returns become advantages (module docstring)."""

    EPISODE = "episode"
    RUNNING = "running"


@dataclass(frozen=True)
class ReinforceConfig:
    """Episodes, Adam step, discount, the base seed (model m uses keys m of it), the baseline."""

    episodes: int = 1000
    learning_rate: float = 1e-3
    discount: float = 0.99
    seed: int = 0
    baseline: Baseline = Baseline.RUNNING

    def __post_init__(self) -> None:
        if self.episodes < 1 or not self.learning_rate > 0 or not 0 < self.discount <= 1:
            raise ValueError(f"ReinforceConfig: bad settings {self}")
        object.__setattr__(self, "baseline", Baseline(self.baseline))


def make_environment(environment: Environment):
    """A gymnasium environment (gymnasium: a dependency of vbnn-lab, ``pip install ./lab``).

    Raises:
        ValueError: gymnasium is not installed (the message says how to install it).
    """
    try:
        import gymnasium  # optional dependency, imported only when an environment is made
    except ImportError as error:
        raise ValueError(
            f"reproduce exploration needs gymnasium ({error}): pip install ./lab"
        ) from error

    name, options = GYM_SETTINGS[Environment(environment)]
    return gymnasium.make(name, **options)


def discounted_returns(rewards: np.ndarray, discount: float) -> np.ndarray:
    """G_t of the module docstring for one episode's rewards (T,)."""
    returns = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + discount * running
        returns[t] = running
    return returns


def normalised_returns(rewards: np.ndarray, discount: float) -> np.ndarray:
    """A_t of the ``episode`` baseline for one episode's rewards (T,)."""
    returns = discounted_returns(rewards, discount)
    return (returns - returns.mean()) / (returns.std() + 1e-8)


class RunningBaseline:
    """The ``running`` baseline of one model: b_t and s from its earlier episodes.

    ``advantages`` gives A_t for an episode's rewards and folds its returns into b with weight
    ``1 - decay``. b_t comes from the earlier episodes only; the scale s folds in the episode's
    own squared residual first (one positive number per episode: it does not turn the episode's
    gradient, and it keeps the second episode from dividing by zero). The first episode, and the
    steps beyond the longest earlier episode, take b_t = G_t (advantage 0: nothing to compare).
    """

    def __init__(self, discount: float, decay: float = 0.9) -> None:
        self.discount, self.decay = discount, decay
        self.means = np.zeros(0)
        self.square = None  # moving average of the mean squared residual

    def advantages(self, rewards: np.ndarray) -> np.ndarray:
        returns = discounted_returns(rewards, self.discount)
        known = min(len(returns), len(self.means))
        baseline = np.concatenate([self.means[:known], returns[known:]])
        residual = returns - baseline
        square = float(np.mean(residual**2))
        self.square = square if self.square is None else (
            self.decay * self.square + (1 - self.decay) * square
        )  # fmt: skip
        # the floor keeps rounding residuals (1e-14 when episodes repeat) from being divided up
        floor = max(1e-6 * float(np.abs(returns).max(initial=0.0)), 1e-8)
        advantages = residual / max(math.sqrt(self.square), floor)
        self.means = np.concatenate([
            self.decay * self.means[:known] + (1 - self.decay) * returns[:known],
            self.means[known:], returns[known:],
        ])  # fmt: skip
        return advantages


def run_episodes(
    environment: Environment, noise: PolicyNoise, models: int, config: ReinforceConfig
) -> tuple[np.ndarray, float]:
    """Train ``models`` policies (seeds 0 .. models-1); returns (scores (models, episodes),
    seconds)."""
    environments = [make_environment(environment) for _ in range(models)]
    observations = environments[0].observation_space.shape[0]
    actions = int(environments[0].action_space.n)
    keys = range(models)
    initial = ModelGenerators.for_keys(config.seed, keys, "init")
    policy = Policy(observations, actions, noise, initial)
    streams = ModelGenerators.for_keys(config.seed, keys, "train")
    choosers = [np.random.default_rng(derive_seed(config.seed, m, "eval")) for m in keys]
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    baselines = [RunningBaseline(config.discount) for _ in keys]
    scores = np.zeros((models, config.episodes))
    started = time.perf_counter()
    for episode in range(config.episodes):
        episode_noise = NoiseTape(source=streams)  # the episode's weights, replayed by the update
        states = [
            env.reset(seed=derive_seed(config.seed, m, "validation") % 2**32 if episode == 0
                      else None)[0]
            for m, env in enumerate(environments)
        ]  # fmt: skip
        trajectories = [([], [], []) for _ in keys]  # states, actions, rewards
        alive = [True] * models
        with torch.no_grad():
            weights = policy.weights(episode_noise)
        while any(alive):
            with torch.no_grad():
                batch = torch.as_tensor(np.stack(states), dtype=torch.float32)[:, None]
                probabilities = torch.softmax(policy.logits(batch, weights)[:, 0], -1).numpy()
            for m in keys:
                if not alive[m]:
                    continue
                cumulative = np.cumsum(probabilities[m])
                action = min(int(np.searchsorted(cumulative, choosers[m].random() * cumulative[-1],
                                                 side="right")), actions - 1)  # fmt: skip
                trajectories[m][0].append(states[m])
                trajectories[m][1].append(action)
                states[m], reward, terminated, truncated, _ = environments[m].step(action)
                trajectories[m][2].append(float(reward))
                alive[m] = not (terminated or truncated)
        rewards = [np.asarray(t[2]) for t in trajectories]
        if config.baseline is Baseline.RUNNING:
            advantages = [b.advantages(r) for b, r in zip(baselines, rewards, strict=True)]
        else:
            advantages = [normalised_returns(r, config.discount) for r in rewards]
        update(policy, episode_noise, optimizer, trajectories, advantages)
        scores[:, episode] = [sum(t[2]) for t in trajectories]
    for env in environments:
        env.close()
    return scores, time.perf_counter() - started


def update(policy, episode_noise, optimizer, trajectories, advantages: list[np.ndarray]) -> None:
    """One Adam step (``vbnn.train_loop``, one iteration) on the summed REINFORCE objectives of
    the models, sum_t A_t log pi(a_t | s_t) with each model's A_t (T_m,), padded to the longest
    episode with zero weights; W_m is replayed from the rollout's tape ``episode_noise``."""
    longest = max(len(t[1]) for t in trajectories)
    models, dimension = len(trajectories), len(trajectories[0][0][0])
    states = torch.zeros(models, longest, dimension)
    actions = torch.zeros(models, longest, dtype=torch.long)
    weights = torch.zeros(models, longest)
    for m, ((seen, taken, _), advantage) in enumerate(zip(trajectories, advantages, strict=True)):
        steps = len(taken)
        states[m, :steps] = torch.as_tensor(np.stack(seen), dtype=torch.float32)
        actions[m, :steps] = torch.as_tensor(taken)
        weights[m, :steps] = torch.as_tensor(advantage)

    def objective(iteration: int) -> dict[str, torch.Tensor]:
        logits = policy.logits(states, policy.weights(episode_noise.replay()))
        chosen = torch.log_softmax(logits, -1).gather(-1, actions[..., None])[..., 0]
        return {"objective": (weights * chosen).sum(-1)}  # (M,)

    train_loop(objective, optimizer, iterations=1)
