"""The state of a training run at the end of an epoch, written whole or not at all.

A run of ``vbnn.train`` is resumable when every number it draws or updates after epoch e is a
function of what this file holds at the end of epoch e:

* the network's and the likelihood's ``state_dict`` (parameters and buffers, e.g. BatchNorm's
  running statistics, a Gaussian likelihood's noise std),
* the optimizer's ``state_dict`` (Adam's moments and step counts),
* the per-model training-noise streams (``ModelGenerators``), the data-order generator(s),
* torch's global RNG (modules that draw without a noise source, e.g. ``nn.Dropout``),
* the epoch, the history of every epoch so far (with its seconds), the best epoch's weights of
  early stopping, and the state of every ``Stateful`` epoch callback (for
  ``PhaseTransitionTracker``: the rows tracked so far).

A learning-rate schedule is a function of the epoch (``LearningRateSchedule``), so it needs no
state of its own. The file is a ``torch.save`` dict of tensors and plain Python values, read back
with ``weights_only=True``; it records the run's settings and is refused (``ValueError`` naming
the file) when they differ from the run asking for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from vbnn.core.randomness import ModelGenerators
from vbnn.stores.atomic import write_atomic


@runtime_checkable
class Stateful(Protocol):
    """An object whose state travels in the checkpoint (an epoch callback's tracked rows, a
    data source's order generator)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ResumableRun:
    """What a checkpoint of one run records and restores (module docstring).

    Attributes:
        settings: the run's settings; a file written under other settings is refused.
        modules: name -> module ("network", "likelihood"); their ``state_dict`` travels.
        optimizer: its ``state_dict`` travels.
        generators: the per-model training-noise streams.
        stateful: further objects whose ``state_dict`` travels (the data source, the epoch
            callbacks); those that are not ``Stateful`` are skipped.
    """

    settings: dict[str, Any]
    modules: dict[str, nn.Module]
    optimizer: torch.optim.Optimizer
    generators: ModelGenerators
    stateful: Sequence[object] = field(default_factory=tuple)


# what save_checkpoint writes
CHECKPOINT_PARTS = (
    "settings",
    "epoch",
    "records",
    "modules",
    "optimizer",
    "generators",
    "torch_rng",
    "stateful",
)


def save_checkpoint(path: Path, run: ResumableRun, *, epoch: int, records: dict[str, Any]) -> Path:
    """Write the state of ``run`` after ``epoch`` (module docstring) and the trainer's
    ``records`` (history, best epoch and weights) to ``path`` atomically."""
    state = {
        "settings": json.dumps(run.settings, sort_keys=True, default=str),
        "epoch": epoch,
        "records": records,
        "modules": {name: module.state_dict() for name, module in run.modules.items()},
        "optimizer": run.optimizer.state_dict(),
        "generators": run.generators.get_state(),
        "torch_rng": torch.get_rng_state(),
        "stateful": [
            item.state_dict() if isinstance(item, Stateful) else None for item in run.stateful
        ],
    }
    return write_atomic(path, lambda file: torch.save(state, file))


def load_checkpoint(path: Path, run: ResumableRun) -> tuple[int, dict[str, Any]] | None:
    """Restore the state stored at ``path`` into the objects of ``run``; returns (epoch, the
    trainer's records), or None when there is no checkpoint.

    Raises:
        ValueError: the checkpoint is unreadable (corrupted or truncated; torch's error
            chained), lacks a part of the state, was written by a run with other settings, or
            for another number of models; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several kinds on a damaged file
        raise ValueError(
            f"checkpoint {path}: unreadable, corrupted or truncated ({type(error).__name__}); "
            "delete it to train from the start"
        ) from error
    missing = [
        part for part in CHECKPOINT_PARTS if not isinstance(state, dict) or part not in state
    ]
    if missing:
        raise ValueError(
            f"checkpoint {path}: not a vbnn.train checkpoint (it lacks {missing}); delete it to "
            "train from the start"
        )
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
    for name, module in run.modules.items():
        module.load_state_dict(state["modules"][name])
    run.optimizer.load_state_dict(state["optimizer"])
    run.generators.set_state(state["generators"])
    torch.set_rng_state(state["torch_rng"])
    for item, saved in zip(run.stateful, state["stateful"], strict=False):
        if isinstance(item, Stateful) and saved is not None:
            item.load_state_dict(saved)
    return int(state["epoch"]), state["records"]
