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


def save_checkpoint(
    path: Path,
    settings: dict[str, Any],
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generators: ModelGenerators,
    shuffle: torch.Generator,
    seconds: list[float],
    callback: object = None,
) -> Path:
    """Write the state after ``epoch`` (module docstring) to ``path`` atomically."""
    state = {
        "settings": json.dumps(settings, sort_keys=True, default=str),
        "epoch": epoch,
        "seconds": list(seconds),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "generators": [g.get_state() for g in generators.generators],
        "shuffle": shuffle.get_state(),
        "torch_rng": torch.get_rng_state(),
        "callback": callback.state_dict() if isinstance(callback, Stateful) else None,
    }
    return write_atomic(path, lambda file: torch.save(state, file))


def load_checkpoint(
    path: Path,
    settings: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generators: ModelGenerators,
    shuffle: torch.Generator,
    callback: object = None,
) -> tuple[int, list[float]] | None:
    """Restore the state stored at ``path`` into the given objects; returns (epoch, seconds of
    each epoch so far), or None when there is no checkpoint.

    Raises:
        ValueError: the checkpoint was written by a run with other settings, or for another
            number of models; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state["settings"] != json.dumps(settings, sort_keys=True, default=str):
        raise ValueError(
            f"checkpoint {path}: written by a run with other settings ({state['settings']}); "
            "delete it or run with the settings it was made with"
        )
    if len(state["generators"]) != len(generators):
        raise ValueError(
            f"checkpoint {path}: holds {len(state['generators'])} noise streams, the run has "
            f"{len(generators)}"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    for generator, stream in zip(generators.generators, state["generators"], strict=True):
        generator.set_state(stream)
    shuffle.set_state(state["shuffle"])
    torch.set_rng_state(state["torch_rng"])
    if isinstance(callback, Stateful) and state["callback"] is not None:
        callback.load_state_dict(state["callback"])
    return int(state["epoch"]), [float(s) for s in state["seconds"]]
