"""The trainer's optimisers (a registry, as the families'), and parameter groups by role.

``OPTIMIZERS`` maps a name to the settings class of an optimiser; ``vbnn.train(...,
optimizer=...)`` takes a name or an instance (``optimizer_settings``). Each settings class is a
frozen dataclass with ``build(network, likelihood, learning_rate=, rates=, prior=,
dataset_size=)`` and
a class attribute ``includes_prior``: False when the objective's KL is part of the loss it is
given (Adam on the ELBO), True when the optimiser holds the prior itself (IVON's weight decay),
so the trainer hands it the expected log-likelihood alone. A new optimiser is one class and one
line of ``OPTIMIZERS``.

Parameters by the roles the families declare:

Each family layer maps the names of its parameters to a ``ParameterRole``
(``VariationalLayer.roles``; parameters it does not name are WEIGHTS). ``learning_rate_groups``
turns a module and one learning rate per role into the parameter groups of a ``torch.optim``
optimizer: every trainer of the package (full-batch UCI, minibatch classification, the
experiments) builds its groups here. ``parameters_with_role`` lists the parameters of one role
(e.g. the mean network's, MEAN, to train it alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import torch
from torch import nn

from vbnn.core.contracts import ParameterRole, Prior
from vbnn.layers.modes import variational_layers
from vbnn.training.natural_gradient import IVON


def parameter_roles(module: nn.Module) -> dict[int, ParameterRole]:
    """id(parameter) -> its role, for the parameters the family layers of ``module`` name."""
    return {
        id(parameter): role
        for layer in variational_layers(module)
        for name, role in layer.roles.items()
        if (parameter := getattr(layer, name, None)) is not None
    }


def parameters_with_role(module: nn.Module, role: ParameterRole | str) -> list[nn.Parameter]:
    """The parameters of ``module`` whose role is ``role``, in module order (WEIGHTS: those no
    family layer names, inside or outside the family layers)."""
    role, roles = ParameterRole(role), parameter_roles(module)
    return [p for p in module.parameters() if roles.get(id(p), ParameterRole.WEIGHTS) is role]


def learning_rate_groups(
    module: nn.Module,
    learning_rate: float,
    rates: Mapping[ParameterRole | str, float | None] | None = None,
) -> list[dict]:
    """Parameter groups of the trainable parameters of ``module``, one per role with a rate.

    Args:
        module: any module (its parameters outside family layers are WEIGHTS).
        learning_rate: the rate of WEIGHTS and of every role without a rate of its own.
        rates: role -> learning rate; a role absent or None shares ``learning_rate`` (and the
            first group).

    Returns:
        ``[{"params": [...], "lr": learning_rate}, {"params": [...], "lr": rate}, ...]``: the
        WEIGHTS group first, then one group per role with its own rate that has parameters, in
        the order of ``ParameterRole``; parameters keep their module order within a group.
    """
    own = {ParameterRole(role): rate for role, rate in (rates or {}).items() if rate is not None}
    roles = parameter_roles(module)
    members: dict[ParameterRole, list] = {role: [] for role in ParameterRole}
    for parameter in module.parameters():
        if parameter.requires_grad:
            role = roles.get(id(parameter), ParameterRole.WEIGHTS)
            members[role if role in own else ParameterRole.WEIGHTS].append(parameter)
    groups = [{"params": members[ParameterRole.WEIGHTS], "lr": learning_rate}]
    groups += [
        {"params": members[role], "lr": own[role]}
        for role in ParameterRole
        if role in own and role is not ParameterRole.WEIGHTS and members[role]
    ]
    return groups


def _groups(
    network: nn.Module,
    likelihood: nn.Module,
    learning_rate: float,
    rates: Mapping[ParameterRole, float | None],
) -> list[dict]:
    """The network's parameter groups by role (``learning_rate_groups``), the likelihood's
    trainable parameters in the first."""
    groups = learning_rate_groups(network, learning_rate, rates)
    groups[0]["params"] += [p for p in likelihood.parameters() if p.requires_grad]
    return groups


@dataclass(frozen=True)
class Adam:
    """``torch.optim.Adam`` on every trainable parameter, at ``vbnn.train``'s ``learning_rate``
    and the per-role ``rates`` of ``TrainerConfig.rates`` (``learning_rate_groups``), on the
    loss -L_s / N of the objective."""

    includes_prior: ClassVar[bool] = False

    def build(
        self,
        network: nn.Module,
        likelihood: nn.Module,
        *,
        learning_rate: float,
        rates: Mapping[ParameterRole, float | None],
        prior: Prior | None,
        dataset_size: int,
    ) -> torch.optim.Optimizer:
        groups = _groups(network, likelihood, learning_rate, rates)
        # foreach: one kernel per update for all parameters (the same numbers, fewer calls)
        return torch.optim.Adam(groups, lr=learning_rate, foreach=True)


@dataclass(frozen=True)
class SGD:
    """``torch.optim.SGD`` with heavy-ball momentum on every trainable parameter, at
    ``vbnn.train``'s ``learning_rate`` and the per-role ``rates`` (``learning_rate_groups``), on
    the loss -L_s / N of the objective: v <- momentum v + g + weight_decay theta,
    theta <- theta - lr v (Nesterov: theta <- theta - lr (g + momentum v)). The optimiser of
    SWAG's iterates (Maddox et al. 2019; ``training.swag``).

    Attributes:
        momentum: the momentum coefficient in [0, 1).
        weight_decay: lambda >= 0 of the decay term; on the per-example loss -L_s / N it is a
            N(0, 1 / (lambda N)) prior on every weight (objective "likelihood"; objective "map"
            holds its prior already).
        nesterov: Nesterov's momentum (needs momentum > 0).
    """

    momentum: float = 0.9
    weight_decay: float = 0.0
    nesterov: bool = False
    includes_prior: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.momentum < 1.0 or self.weight_decay < 0:
            raise ValueError(
                f"SGD: momentum must lie in [0, 1) and weight_decay be >= 0, got "
                f"{self.momentum} and {self.weight_decay}"
            )
        if self.nesterov and self.momentum == 0:
            raise ValueError("SGD: nesterov=True needs momentum > 0")

    def build(
        self,
        network: nn.Module,
        likelihood: nn.Module,
        *,
        learning_rate: float,
        rates: Mapping[ParameterRole, float | None],
        prior: Prior | None,
        dataset_size: int,
    ) -> torch.optim.Optimizer:
        groups = _groups(network, likelihood, learning_rate, rates)
        return torch.optim.SGD(
            groups,
            lr=learning_rate,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            nesterov=self.nesterov,
            foreach=True,
        )


OPTIMIZERS: Mapping[str, type] = MappingProxyType({"adam": Adam, "ivon": IVON, "sgd": SGD})

OptimizerSettings = Adam | IVON | SGD


def optimizer_settings(value: str | OptimizerSettings) -> OptimizerSettings:
    """The settings named ``value`` (with their defaults), or ``value`` itself.

    Raises:
        ValueError: an unknown name (the registered names listed).
        TypeError: neither a name nor an instance of a settings class of ``OPTIMIZERS`` (e.g.
            ``torch.optim.SGD``, or ``vbnn.IVON`` not called); the message lists what is
            accepted.
    """
    classes = tuple(OPTIMIZERS.values())
    names = ", ".join(repr(name) for name in OPTIMIZERS)
    if isinstance(value, classes):
        return value
    if isinstance(value, str):
        if value not in OPTIMIZERS:
            raise ValueError(f"optimizer: unknown {value!r}; choose one of {names}")
        return OPTIMIZERS[value]()
    kind = value if isinstance(value, type) else type(value)
    hint = ""
    if issubclass(kind, classes):
        hint = f"; call the class: {kind.__name__}()"
    elif issubclass(kind, torch.optim.Optimizer):
        hint = (
            "; vbnn.train builds its optimiser itself (to step a torch.optim optimiser of your "
            "own, use vbnn.train_loop)"
        )
    settings = ", ".join(f"{c.__name__}(...)" for c in classes)
    raise TypeError(
        f"optimizer: {kind.__name__} is not a vbnn optimiser setting; give a name ({names}) or "
        f"an instance of its settings ({settings}){hint}"
    )
