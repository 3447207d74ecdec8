"""The state of a minibatch run at the end of an epoch, written whole or not at all.

A run of ``classification.training.train_classifier`` is resumable when every number it draws
or updates after epoch e is a function of what this file holds at the end of epoch e:

* the model's ``state_dict`` (parameters and buffers, e.g. BatchNorm's running statistics),
* the optimizer's ``state_dict`` (Adam's moments and step counts),
* the per-model training-noise streams (``ModelGenerators``) and the data-order generator,
* torch's global RNG (layers without an explicit stream draw from it),
* the epoch, the seconds of every epoch so far, and the state of the epoch callback (for
  ``PhaseTransitionTracker``: the rows tracked so far).

The learning-rate schedule is a function of the epoch (``LearningRateSchedule``), so it needs no
state of its own. The file is a ``torch.save`` dict of tensors and plain Python values, read back
with ``weights_only=True``; it records the run's settings and is refused (``ValueError`` naming
the file) when they differ from the run asking for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from vbnn.core.randomness import ModelGenerators
from vbnn.stores.atomic import write_atomic


@runtime_checkable
class Stateful(Protocol):
    """An epoch callback whose state travels in the checkpoint (e.g. tracked rows)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ResumableRun:
    """What a checkpoint of one run records and restores (module docstring).

    Attributes:
        settings: the run's settings; a file written under other settings is refused.
        model, optimizer: their ``state_dict`` travels.
        generators: the per-model training-noise streams.
        shuffle: the data-order generator.
        callback: the epoch callback; its state travels when it is ``Stateful``.
    """

    settings: dict[str, Any]
    model: nn.Module
    optimizer: torch.optim.Optimizer
    generators: ModelGenerators
    shuffle: torch.Generator
    callback: object = None


def save_checkpoint(path: Path, run: ResumableRun, *, epoch: int, seconds: list[float]) -> Path:
    """Write the state of ``run`` after ``epoch`` (module docstring) to ``path`` atomically."""
    state = {
        "settings": json.dumps(run.settings, sort_keys=True, default=str),
        "epoch": epoch,
        "seconds": list(seconds),
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "generators": run.generators.get_state(),
        "shuffle": run.shuffle.get_state(),
        "torch_rng": torch.get_rng_state(),
        "callback": run.callback.state_dict() if isinstance(run.callback, Stateful) else None,
    }
    return write_atomic(path, lambda file: torch.save(state, file))


def load_checkpoint(path: Path, run: ResumableRun) -> tuple[int, list[float]] | None:
    """Restore the state stored at ``path`` into the objects of ``run``; returns (epoch, seconds of
    each epoch so far), or None when there is no checkpoint.

    Raises:
        ValueError: the checkpoint was written by a run with other settings, or for another
            number of models; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state["settings"] != json.dumps(run.settings, sort_keys=True, default=str):
        raise ValueError(
            f"checkpoint {path}: written by a run with other settings ({state['settings']}); "
            "delete it or run with the settings it was made with"
        )
    if len(state["generators"]) != len(run.generators):
        raise ValueError(
            f"checkpoint {path}: holds {len(state['generators'])} noise streams, the run has "
            f"{len(run.generators)}"
        )
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.generators.set_state(state["generators"])
    run.shuffle.set_state(state["shuffle"])
    torch.set_rng_state(state["torch_rng"])
    if isinstance(run.callback, Stateful) and state["callback"] is not None:
        run.callback.load_state_dict(state["callback"])
    return int(state["epoch"]), [float(s) for s in state["seconds"]]
