"""Early stopping of ``vbnn.train``: keep the weights of the epoch with the lowest validation NLL,
stop after ``patience`` epochs without a lower one.

The record travels in the run's checkpoint as a dict of plain values (``as_checkpoint``), so a
resumed run stops at the epoch an unbroken run stops at and restores the same weights.

One score decides for the whole network (a stack's validation NLL is averaged over its models).
The UCI engine's full-batch training (``regression.full_batch``) keeps a different record: each
model of its stack keeps the weights of its own best check, checked every ``eval_every`` steps
over the whole run, with no patience.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class EarlyStopping:
    """The best epoch so far and whether the run has stopped.

    Attributes:
        patience: epochs without a lower validation NLL before the run stops (None: never stop,
            keep no weights).
        best_epoch: the epoch of the lowest validation NLL (0: none yet).
        best_nll: its validation NLL.
        best_state: a CPU copy of the modules' ``state_dict`` at ``best_epoch`` (None: none yet).
        stopped: ``patience`` epochs have passed since ``best_epoch``.
    """

    patience: int | None
    best_epoch: int = 0
    best_nll: float = float("inf")
    best_state: dict[str, torch.Tensor] | None = None
    stopped: bool = False

    def update(self, epoch: int, validation_nll: float, modules: nn.Module) -> None:
        """Record ``epoch``'s validation NLL; keep ``modules``' weights when it is the lowest."""
        if self.patience is None:
            return
        if validation_nll < self.best_nll:
            self.best_nll, self.best_epoch = validation_nll, epoch
            self.best_state = copy.deepcopy(
                {k: v.detach().cpu() for k, v in modules.state_dict().items()}
            )
        self.stopped = epoch - self.best_epoch >= self.patience

    def restore(self, modules: nn.Module) -> None:
        """Load the best epoch's weights into ``modules`` (nothing when none was kept)."""
        if self.best_state is not None:
            modules.load_state_dict(self.best_state)

    def as_checkpoint(self) -> dict[str, Any]:
        """The record as the checkpoint's plain values."""
        return {
            "best_epoch": self.best_epoch,
            "best_nll": self.best_nll,
            "best_state": self.best_state,
            "stopped": self.stopped,
        }

    @classmethod
    def from_checkpoint(cls, patience: int | None, saved: dict[str, Any]) -> EarlyStopping:
        """The record ``as_checkpoint`` wrote."""
        fields = ("best_epoch", "best_nll", "best_state", "stopped")
        return cls(patience, *(saved[name] for name in fields))
