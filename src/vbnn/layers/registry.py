"""The one registry of variational families: name -> ``FamilySpec``.

Every entry passes the contract tests (tests/test_family_contract.py), dense and, where the spec
says so, convolutional. The UCI engine (``--family``), LeNet-5, the CLI and the tests all read
this table. A new family is one module under ``vbnn.layers`` plus one entry here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from vbnn.layers.additive import Additive
from vbnn.layers.bernoulli_variance import BernoulliVariance
from vbnn.layers.binary_dropout import BinaryDropout
from vbnn.layers.fixed_variance import FixedVariance
from vbnn.layers.full_covariance import FullCovariance
from vbnn.layers.low_rank_covariance import LowRankCovariance
from vbnn.layers.mean_field import MeanField
from vbnn.layers.point import Point
from vbnn.layers.shell import VariationalLayer
from vbnn.layers.uniform_variance import UniformVariance
from vbnn.layers.variational_dropout import LayerDropout, NeuronDropout, WeightDropout
from vbnn.layers.zero_mean import ZeroMean


@dataclass(frozen=True)
class FamilySpec:
    """One family: its layer class, fixed options, and what it supports.

    Attributes:
        name: the registry key.
        layer: the ``VariationalLayer`` subclass.
        description: one line for listings.
        options: keyword arguments every layer of this family gets.
        convolution: whether the family has convolution operators (1-, 2- and 3-D, and their
            transposes).
        variational: whether it has a KL term (False: point weights or the dropout baseline).
        closed_form_kl: whether its KL to a Gaussian prior is finite and in closed form (the
            contract tests compare it with a Monte-Carlo estimate).
    """

    name: str
    layer: type[VariationalLayer]
    description: str
    options: Mapping[str, Any] = field(default_factory=dict)
    convolution: bool = True
    variational: bool = True
    closed_form_kl: bool = True

    def accepted_options(self) -> set[str]:
        """The keyword options a layer of this family takes: its own (``init_std``, ``std``,
        ``log_alpha``, ``dtype``, ...) and the shell's (``kernel_size``, ``bias``, ...)."""
        names: set[str] = set()
        for cls in (self.layer, VariationalLayer):
            parameters = inspect.signature(cls.__init__).parameters.values()
            names |= {p.name for p in parameters if p.kind is not p.VAR_KEYWORD}
        return names - {"self", "in_features", "out_features", "generators"} - set(self.options)

    def std_option(self) -> str:
        """The keyword that sets this family's posterior std, for a caller that holds one std
        for any family: ``"std"`` where the family fixes it (``gd``), else ``"init_std"`` (the
        marginal posterior std at initialisation of a learned variance; ``build`` refuses it,
        naming the family, where the family has no std, e.g. ``point``)."""
        return "std" if "std" in self.accepted_options() else "init_std"

    def build(
        self, in_features: int, out_features: int, generators: Any = None, **options: Any
    ) -> VariationalLayer:
        """A layer of this family; ``options`` add to (and may not repeat) the fixed ones.

        Raises:
            ValueError: an option the family fixes, or one its layer does not take (e.g.
                ``init_std`` for ``point`` or variational dropout); the message names the
                family and lists the options it takes.
        """
        clash = set(options) & set(self.options)
        if clash:
            raise ValueError(f"family {self.name!r} fixes {sorted(clash)}; do not pass them")
        unknown = set(options) - self.accepted_options()
        if unknown:
            raise ValueError(
                f"family {self.name!r} takes no option {sorted(unknown)}; it takes "
                f"{sorted(self.accepted_options())}"
            )
        return self.layer(in_features, out_features, generators, **self.options, **options)


_SPECS = (
    FamilySpec("mf", MeanField, "mean-field Gaussian, learned variances (LRT)"),
    FamilySpec("gd", FixedVariance, "mean-field Gaussian with one fixed std (LRT)"),
    FamilySpec("fc", FullCovariance, "full-covariance Gaussian per layer", convolution=False),
    FamilySpec(
        "fc-low-rank",
        LowRankCovariance,
        "Gaussian per layer, diagonal plus rank-r covariance (option rank)",
        convolution=False,
    ),
    FamilySpec("point", Point, "point weights (ES, MAP, SGLD)", variational=False),
    FamilySpec("vd-layer", LayerDropout, "variational dropout, one alpha per layer"),
    FamilySpec("vd-neuron", NeuronDropout, "variational dropout, one alpha per output unit"),
    FamilySpec("vd-weight", WeightDropout, "variational dropout, one alpha per weight"),
    FamilySpec("additive", Additive, "N(mu, sigma^2) with the dropout priors' KL through alpha"),
    FamilySpec("zero-mean", ZeroMean, "Gaussian variance layer N(0, sigma^2)"),
    FamilySpec(
        "bernoulli-variance",
        BernoulliVariance,
        "variance layer theta (2 Bernoulli(1/2) - 1)",
        closed_form_kl=False,
    ),
    FamilySpec("uniform-variance", UniformVariance, "variance layer theta U(-1, 1)"),
    FamilySpec(
        "dropout",
        BinaryDropout,
        "binary dropout (rate 0.5) on the input, point weights",
        {"rate": 0.5},
        variational=False,
    ),
)

FAMILIES: Mapping[str, FamilySpec] = MappingProxyType({spec.name: spec for spec in _SPECS})


def family(name: str) -> FamilySpec:
    """The spec registered as ``name``; a ValueError lists the choices otherwise."""
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; choose from {', '.join(FAMILIES)}")
    return FAMILIES[name]
