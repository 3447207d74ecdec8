"""How much of a fresh policy's action probability is episode noise and how much is state.

For the policies of ``policy`` at initialisation, on states that a uniformly random policy
visits in CartPole: the standard deviation of p(a_0 | s) across the per-episode weight draws at a
fixed state (the exploration noise), beside its standard deviation across states of the
draw-averaged probability (what the state tells the policy). Used in the exploration README to
describe the start of the variance policy's learning; run it with

    python -m vbnn_lab.exploration.diagnostic
"""

from __future__ import annotations

import numpy as np
import torch

from vbnn.core.randomness import ModelGenerators
from vbnn_lab.exploration.policy import Policy, PolicyNoise
from vbnn_lab.exploration.reinforce import Environment, make_environment


def random_policy_states(episodes: int = 20, seed: int = 0) -> torch.Tensor:
    """The states (N, 4) of ``episodes`` CartPole episodes under uniformly random actions."""
    environment = make_environment(Environment.CARTPOLE)
    chooser = np.random.default_rng(seed)
    states = []
    for episode in range(episodes):
        state, _ = environment.reset(seed=seed + episode)
        done = False
        while not done:
            states.append(state)
            state, _, terminated, truncated, _ = environment.step(int(chooser.integers(2)))
            done = terminated or truncated
    environment.close()
    return torch.as_tensor(np.stack(states), dtype=torch.float32)


def noise_and_signal(
    noise: PolicyNoise, states: torch.Tensor, draws: int = 100, seed: int = 0
) -> tuple[float, float]:
    """(std of p(a_0 | s) across draws at fixed s, root-mean over s; std across s of the mean
    over draws) for one freshly initialised policy with 2 actions."""
    policy = Policy(states.shape[-1], 2, noise, ModelGenerators.for_keys(seed, [0], "init"))
    streams = ModelGenerators.for_keys(seed, [0], "train")
    probabilities = []
    with torch.no_grad():
        for _ in range(draws):
            logits = policy.logits(states[None], policy.weights(streams))  # one episode's draw
            probabilities.append(torch.softmax(logits, -1)[0, :, 0])
    table = torch.stack(probabilities).double()  # (draws, states)
    across_draws = table.var(0, correction=0).mean().sqrt().item()
    across_states = table.mean(0).std(correction=0).item()
    return across_draws, across_states


def main() -> None:
    states = random_policy_states()
    print(f"{len(states)} CartPole states of a random policy; 100 draws; mean of seeds 0-2")
    print("| policy | std across episode draws | std across states |")
    print("|---|---|---|")
    for noise in PolicyNoise:
        values = np.array([noise_and_signal(noise, states, seed=seed) for seed in range(3)])
        draws, states_std = values.mean(0)
        print(f"| {noise.value} | {draws:.4f} | {states_std:.4f} |")


if __name__ == "__main__":
    main()
