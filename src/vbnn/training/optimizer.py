"""Parameters by the roles the families declare, and optimizer groups from them.

Each family layer maps the names of its parameters to a ``ParameterRole``
(``VariationalLayer.roles``; parameters it does not name are WEIGHTS). ``learning_rate_groups``
turns a module and one learning rate per role into the parameter groups of a ``torch.optim``
optimizer: every trainer of the package (full-batch UCI, minibatch classification, the
experiments) builds its groups here. ``parameters_with_role`` lists the parameters of one role
(e.g. the mean network's, MEAN, to train it alone).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from vbnn.core.contracts import ParameterRole
from vbnn.layers.modes import variational_layers


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
