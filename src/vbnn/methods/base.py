"""The contract of a method: how a posterior approximation trains a network and predicts.

A method is one object (``Method``) that says how to prepare the user's network (convert it to
a family, or keep it), what ``vbnn.train`` optimises and with which optimiser, whether it trains
several members (an ensemble) or stops early on held-out examples, and how its predictive draws
samples once trained (``Method.predictor``). ``vbnn.compare`` trains every entry through this
one contract on a network and on a table, so a new method is one module and one line of
``methods.registry.METHODS``. The steps, for one member of one replicate:

    network = method.prepare(initial network, run)     # run: the entry's settings (EntryRun)
    result  = vbnn.train(network, data, objective=method.objective, optimizer=..., callbacks=...)
    draw    = method.predictor(Fitted(result, data, ...), run, seed)   # x -> (K, N, ...) samples

The UCI engine's batched algorithms (``es``, ``map``, ``sgld`` and VI of the families with a
closed-form KL) also train on a table as stacks of folds (``Method.engine``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import nn

from vbnn.networks.conversion import convert
from vbnn.training.settings import Objective

Draw = Callable[[torch.Tensor], torch.Tensor]


class PredictiveKind(str, Enum):
    """How a trained method turns inputs into predictive samples (K, N, ...).

    POSTERIOR: K weight draws of the family's q ("weights" mode). POINT: one pass of the trained
    network. MC_DROPOUT: K passes with the network's dropout layers active. LAPLACE: K draws of a
    last-layer Laplace approximation's linearised predictive. SWAG: K draws of the SWAG
    Gaussian over the SGD iterates. ENGINE: the UCI engine's own predictive (tables only).
    """

    POSTERIOR = "posterior"
    POINT = "point"
    MC_DROPOUT = "mc-dropout"
    LAPLACE = "laplace"
    SWAG = "swag"
    ENGINE = "engine"


@dataclass(frozen=True)
class Fitted:
    """One trained member, what its predictive is built from.

    Attributes:
        network: the trained network (in ``.eval()`` mode, on its training device).
        data: its training examples (x, y), targets standardised for a regressor.
        regression: a regressor (one output, a Gaussian likelihood) rather than a classifier.
        noise_std: a regressor's trained noise std in the standardised units (1 for a classifier).
        callbacks: the method's training callbacks after training (a SWAG collector).
    """

    network: nn.Module
    data: tuple[torch.Tensor, torch.Tensor]
    regression: bool
    noise_std: float
    callbacks: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Method:
    """A posterior approximation (module docstring). Subclasses override what differs.

    Attributes:
        name: the name an entry gives (``compare(..., families=[name])``).
        summary: one line for listings and docs.
        family: the ``vbnn.FAMILIES`` name the network is converted to; None: trained as given.
        optimizer: ``vbnn.train``'s optimiser name ("adam", "ivon", "sgd").
        predictive: how samples are drawn (``PredictiveKind``).
        ensemble: M members, each from its own initial weights (``EntryRun.ensemble_size``).
        early_stopping: held-out examples stop the run (``EntryRun.patience``).
        engine: the UCI engine trains it on a table as batched stacks of folds.
        network: it trains a user's network (every method but the engine-only ``es``, ``map``,
            ``sgld``).
        pretrained: it adapts the network's pretrained weights (a LoRA adapter on them, frozen):
            an ensemble's members share the initial network (each its own adapter draw and
            minibatch order), and a table, which holds no pretrained network, refuses it.
    """

    name: str
    summary: str
    family: str | None = None
    optimizer: str = "adam"
    predictive: PredictiveKind = PredictiveKind.POSTERIOR
    ensemble: bool = False
    early_stopping: bool = False
    engine: bool = False
    network: bool = True
    pretrained: bool = False

    @property
    def objective(self) -> Objective:
        """The ELBO for a family's posterior, maximum likelihood for a network as given."""
        return Objective.ELBO if self.family is not None else Objective.LIKELIHOOD

    def prepare(self, network: nn.Module, run: Any = None) -> nn.Module:
        """The network this method trains: converted to its family, else as given (``run``: the
        entry's settings, ``comparison.entries.EntryRun``)."""
        return network if self.family is None else convert(network, self.family)

    def check(self, network: nn.Module, example: torch.Tensor, run: Any) -> None:
        """ValueError, before any training, when the method cannot run on ``network`` (an
        initial network; ``example``: two training inputs) with the entry's settings ``run``."""
        if self.ensemble and run.ensemble_size < 2:
            raise ValueError(
                f"ensemble_size={run.ensemble_size}; an ensemble needs at least 2 "
                "members (one member is 'point', or 'ivon')"
            )
        if self.family is not None:
            self.prepare(copy.deepcopy(network), run)

    def train_options(self, run: Any, network: nn.Module) -> dict[str, Any]:
        """``vbnn.train``'s keyword arguments that this method sets for ``network`` (the
        optimiser; a method may add its learning rate and callbacks)."""
        return {"optimizer": self.optimizer}

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        """The trained member's predictive, x -> K samples (K, N, ...), and the seconds spent
        building it (a post-hoc fit, counted as training)."""
        raise NotImplementedError(f"method {self.name!r} has no predictive on a network")
