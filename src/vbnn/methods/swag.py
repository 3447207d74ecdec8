"""``swag`` and ``multiswag``: SWAG over the SGD iterates of the network as given.

The network trains by SGD with momentum (``vbnn.SGD``) on the likelihood at a constant step
``SWAG_LEARNING_RATE``; from the epoch after half of the run, each epoch's weights are an iterate
of ``vbnn.SWAGCollector`` (Maddox et al. 2019, Algorithm 1: mean, diagonal and the last K
deviations, K up to ``SWAG_RANK``). The predictive draws K weight samples from the SWAG Gaussian
(eq. 1, scale 1/2), batch-norm statistics recomputed on the training inputs for each
(``vbnn.swag_predict``). ``multiswag`` is M such runs from their own initial weights, the equal
mixture of their predictives (Wilson & Izmailov 2020).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vbnn.methods.base import Draw, Fitted, Method
from vbnn.training.swag import BatchNormData, SWAGCollector, swag_predict

# SGD's constant step during collection (with momentum 0.9): a convention, not tuned.
SWAG_LEARNING_RATE = 0.01
# Maddox et al. 2019's rank of the deviation matrix.
SWAG_RANK = 20


def collection(epochs: int) -> tuple[int, int]:
    """(first epoch collected, rank) of a run of ``epochs``: the second half of the epochs,
    rank min(``SWAG_RANK``, snapshots), 0 (diagonal) below two snapshots."""
    start = epochs // 2 + 1
    rank = min(SWAG_RANK, epochs - start + 1)
    return start, rank if rank >= 2 else 0


@dataclass(frozen=True)
class SWAG(Method):
    """SGD iterates' Gaussian (module docstring)."""

    def train_options(self, run: Any, network: nn.Module) -> dict[str, Any]:
        start, rank = collection(run.epochs)
        collector = SWAGCollector(network, rank=rank, start=start)
        return {"optimizer": "sgd", "learning_rate": SWAG_LEARNING_RATE, "callbacks": [collector]}

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        (collector,) = fitted.callbacks
        posterior = collector.posterior()
        batch = run.batch_size or len(fitted.data[1])
        norms = BatchNormData(fitted.data[0], batch)

        def draw(x: torch.Tensor) -> torch.Tensor:
            generator = torch.Generator().manual_seed(seed)
            samples = swag_predict(
                posterior,
                fitted.network,
                x,
                samples=run.samples,
                generator=generator,
                batch_norm=norms,
                batch_size=batch,
            )
            return samples.cpu()

        return draw, 0.0
