"""Milliseconds a training step of several models, measured in one interleaved run.

Used by ``time_to_quality.py`` (its ``steps`` clock): a warm-up for every model, then rounds in
which each model in turn takes a run of timed steps; each model's time is the median over
rounds. Interleaving spreads any change of the machine's speed over every model alike, so their
ratios are measured in one run.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Protocol


class Steppable(Protocol):
    def step(self) -> None: ...


def measure_step_times(trainers: dict[str, Steppable], warmup: int, steps: int,
                       rounds: int) -> dict[str, Any]:  # fmt: skip
    """``{"ms_per_step": {name: median ms}, "rounds": {name: [ms of each round]}}``.

    Raises:
        ValueError: ``steps`` or ``rounds`` below 1, or ``warmup`` below 0 (named).
    """
    for name, value, least in (("warmup", warmup, 0), ("steps", steps, 1), ("rounds", rounds, 1)):
        if value < least:
            raise ValueError(f"measure_step_times: {name} must be >= {least}, got {value}")
    for trainer in trainers.values():
        for _ in range(warmup):
            trainer.step()
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(rounds):
        for name, trainer in trainers.items():
            start = time.perf_counter()
            for _ in range(steps):
                trainer.step()
            times[name].append(1000 * (time.perf_counter() - start) / steps)
    return {"ms_per_step": {name: statistics.median(ms) for name, ms in times.items()},
            "rounds": times}  # fmt: skip
