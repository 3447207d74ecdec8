"""Exploration with variance-layer parameter noise in reinforcement learning (Neklyudov et al. 2019
section 6.2).

REINFORCE (``reinforce``) on CartPole (200-step episodes, as CartPole-v0) and Acrobot-v1 with a
policy MLP of three 256-unit hidden layers whose second hidden layer is deterministic, Gaussian
parameter noise or a variance layer (``policy``), noise sampled per episode, Adam, 9 seeds trained
as one stack. Writes ``scores.csv`` (score of every episode and seed), ``exploration.png`` (mean and
spread over seeds per episode, like Neklyudov et al. 2019 Fig. 6), ``summary.md`` and ``run.json``.
Each finished (environment, policy) cell is stored in ``OUT/runs`` (``stores.unit_store``) and
reused. Neklyudov et al. 2019 prints no numbers for this experiment (curves only). Needs gymnasium,
a dependency of this package.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vbnn.plots import pyplot, save_figure
from vbnn.stores import unit_store
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table
from vbnn_lab.exploration.policy import PolicyNoise
from vbnn_lab.exploration.reinforce import (
    Baseline,
    Environment,
    ReinforceConfig,
    run_episodes,
)

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = "RL exploration (Neklyudov et al. 2019 sec. 6.2): REINFORCE, variance-layer noise"
DEFAULT_OUT = "results/exploration"
SEEDS, EPISODES, QUICK_SEEDS, QUICK_EPISODES = 9, 1000, 3, 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SEEDS} seeds, "
                        f"{QUICK_EPISODES} episodes")  # fmt: skip
    parser.add_argument("--env", choices=[*(e.value for e in Environment), "both"],
                        default="both")  # fmt: skip
    parser.add_argument("--policy", choices=[*(p.value for p in PolicyNoise), "all"],
                        default="all", help="the second hidden layer")  # fmt: skip
    parser.add_argument("--episodes", type=int, default=None, help=f"default {EPISODES}")
    parser.add_argument("--seeds", type=int, default=None, help=f"default {SEEDS}")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam step")
    parser.add_argument("--baseline", choices=[b.value for b in Baseline], default="running",
                        help="advantages: returns minus a running mean over earlier episodes "
                        "(unbiased), or normalised per episode (reinforce.py)")  # fmt: skip
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0, help="base seed of the 9 streams")
    parser.add_argument("--no-progress", action="store_true", help="(accepted, no bar)")


def train_cell(
    environment: Environment, noise: PolicyNoise, seeds: int, config: ReinforceConfig, store: Path
) -> tuple[np.ndarray, float]:
    """Scores (seeds, episodes) and training seconds of one cell, from the store when present."""
    settings = {"environment": environment.value, "policy": noise.value, "seeds": seeds,
                **asdict(config)}  # fmt: skip
    stored = unit_store.load(store, settings)
    if stored is not None:
        arrays, info = stored
        return arrays["scores"], info["seconds"]
    scores, seconds = run_episodes(environment, noise, seeds, config)
    unit_store.save(store, settings, {"scores": scores}, {"seconds": seconds,
                    "threads": torch.get_num_threads()})  # fmt: skip
    return scores, seconds


def smoothed(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over the last ``window`` episodes (fewer at the start)."""
    cumulative = np.cumsum(values, axis=-1)
    out = cumulative.copy()
    out[..., window:] = cumulative[..., window:] - cumulative[..., :-window]
    counts = np.minimum(np.arange(1, values.shape[-1] + 1), window)
    return out / counts


def plot_scores(frame: pd.DataFrame, path: Path, window: int) -> Path:
    """Mean over seeds (line) and +- one std over seeds (band) of the smoothed score."""
    environments = list(dict.fromkeys(frame["environment"]))
    figure, axes = pyplot().subplots(1, len(environments), figsize=(5.5 * len(environments), 3.8),
                                  squeeze=False)  # fmt: skip
    for axis, environment in zip(axes[0], environments, strict=True):
        part = frame[frame["environment"] == environment]
        for policy, group in part.groupby("policy", sort=False):
            table = group.pivot(index="seed", columns="episode", values="score").to_numpy()
            curve = smoothed(table, window)
            mean, spread = curve.mean(0), curve.std(0)
            episodes = np.arange(1, table.shape[1] + 1)
            axis.plot(episodes, mean, label=policy)
            axis.fill_between(episodes, mean - spread, mean + spread, alpha=0.2)
        axis.set(xlabel="# episode", ylabel=f"score (mean of last {window} episodes)",
                 title=f"{environment}, {table.shape[0]} seeds")  # fmt: skip
        axis.legend(fontsize=8)
    figure.tight_layout()
    return save_figure(figure, path, dpi=120)


def run(args: argparse.Namespace) -> None:
    seeds = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
    episodes = args.episodes or (QUICK_EPISODES if args.quick else EPISODES)
    config = ReinforceConfig(episodes=episodes, learning_rate=args.learning_rate, seed=args.seed,
                             baseline=Baseline(args.baseline))  # fmt: skip
    environments = list(Environment) if args.env == "both" else [Environment(args.env)]
    policies = list(PolicyNoise) if args.policy == "all" else [PolicyNoise(args.policy)]
    out, started = Path(args.out), time.perf_counter()
    rows, summary, costs = [], [], {}
    for environment in environments:
        for noise in policies:
            scores, seconds = train_cell(environment, noise, seeds, config, out / "runs")
            costs[f"{environment.value}/{noise.value}"] = seconds
            for seed, episode in np.ndindex(scores.shape):
                rows.append({"environment": environment.value, "policy": noise.value,
                             "seed": seed, "episode": episode + 1,
                             "score": scores[seed, episode]})  # fmt: skip
            tail = scores[:, -max(1, episodes // 10) :].mean(1)
            summary.append({"environment": environment.value, "policy": noise.value,
                            "score, last 10% of episodes (mean)": float(tail.mean()),
                            "std over seeds": float(tail.std()),
                            "score, all episodes (mean)": float(scores.mean()),
                            "train s": round(seconds)})  # fmt: skip
            print(f"{environment.value} {noise.value}: last-10% score {tail.mean():.1f} +- "
                  f"{tail.std():.1f} over {seeds} seeds ({seconds:.0f} s)")  # fmt: skip
    frame = pd.DataFrame(rows)
    write_atomic(out / "scores.csv", frame.to_csv(index=False))
    window = max(1, min(50, episodes // 10))
    plot_scores(frame, out / "exploration.png", window)
    seconds = time.perf_counter() - started
    note = (f"REINFORCE, {seeds} seeds, {episodes} episodes, Adam {args.learning_rate}, discount "
            f"{config.discount}, {config.baseline.value} baseline; score = return of each "
            f"training episode; wall {seconds:.0f} s "
            f"(threads={torch.get_num_threads()})")  # fmt: skip
    text = f"{note}\n\n{markdown_table(pd.DataFrame(summary), float_format='{:.1f}')}\n"
    write_atomic(out / "summary.md", text)
    record = {"config": asdict(config), "seeds": seeds, "seconds": seconds, "cells": costs}
    write_atomic(out / "run.json", json.dumps(record, indent=1))
    print(text)
