"""Methods by name: ``es``, ``map``, ``sgld``, or a family of ``vbnn.layers.FAMILIES``, which VI
fits (``mf``, ``gd`` and ``fc`` of Trippe & Turner 2017 are three of them).

The UCI engine trains every family under the Gaussian prior N(0, prior_std^2) and takes each
layer's KL to it in closed form, so a family without one (``FamilySpec.closed_form_kl`` False:
``bernoulli-variance``, whose discrete q has an infinite KL to any density) is no method here;
train it with its own prior (``vbnn.elbo`` with ``prior=None``, or ``BayesianClassifier``).

:func:`add_runtime_arguments` gives a command the flags of the runtime fields of every method's
config (``--compile``, ``--device``).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from vbnn.layers.registry import FAMILIES
from vbnn.regression.runs import CONFIGS, Algorithm, TrainConfig, VIConfig

POINT_ALGORITHMS = tuple(a.value for a in Algorithm if a is not Algorithm.VI)


def method_names() -> list[str]:
    """Every method name: the point-weight algorithms, then the families VI fits (those with a
    closed-form KL to a Gaussian prior, module docstring)."""
    return [*POINT_ALGORITHMS, *(name for name, spec in FAMILIES.items() if spec.closed_form_kl)]


def check_method(method: str) -> str:
    """``method`` if it names a method; a ValueError that lists the choices otherwise (and, for
    a family the engine cannot train, says why)."""
    if method in FAMILIES and not FAMILIES[method].closed_form_kl:
        raise ValueError(
            f"method {method!r}: the UCI engine trains every family under a Gaussian prior "
            f"N(0, prior_std^2) with its KL in closed form, and {method} has no finite one; "
            f"the engine's methods are {', '.join(method_names())}"
        )
    if method not in method_names():
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(method_names())}")
    return method


def config_class(method: str) -> type[TrainConfig]:
    """The config class of a method name: a point-weight algorithm (``es``, ``map``, ``sgld``) or a
    family name, which spells VI with that family (``mf``, ``gd``, ``fc``, ...)."""
    return CONFIGS[Algorithm(method)] if method in POINT_ALGORITHMS else VIConfig


def method_config(method: str, **values: Any) -> TrainConfig:
    """The config of ``method`` (``es``, ``map``, ``sgld``, or a family name for VI) with
    ``values``; a value the method does not take is an error that names it."""
    cls = config_class(check_method(str(method)))
    if cls is VIConfig:
        values = {"family": str(method), **values}
    accepted = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - accepted)
    if unknown:
        raise ValueError(
            f"method {method!r} ({cls.__name__}) takes no {', '.join(unknown)}; it takes "
            f"{', '.join(sorted(accepted))}"
        )
    return cls(**values)


def method_fields(method: str) -> set[str]:
    """The settings ``method``'s config takes (``family`` included for VI)."""
    return {f.name for f in dataclasses.fields(config_class(str(method)))}


def taken_by(method: str, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that ``method``'s config takes (settings given for several
    methods at once: a command line, a grid)."""
    accepted = method_fields(method)
    return {name: value for name, value in values.items() if name in accepted}


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """``--compile`` and ``--device``: where and how a stack trains (neither changes the config
    hash of stored runs: ``stores.results_db``)."""
    parser.add_argument(
        "--compile", action="store_true", help="fuse each training step (torch.compile; needs g++)"
    )
    parser.add_argument(
        "--device", default="cpu", help="where stacks train: cpu (default), cuda, cuda:1, ..."
    )
