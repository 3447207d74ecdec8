"""The one registry of variational families: name -> ``FamilySpec``.

Every entry passes the contract tests (tests/test_family_contract.py), dense and, where the spec
says so, convolutional. The UCI engine (``--family``), LeNet-5, the CLI and the tests all read
this table. A new family is one module under ``vbnn.layers`` plus one entry here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from vbnn.core.defaults import GD_POSTERIOR_STD
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
from vbnn.priors.gaussian import GaussianPrior


class WeightPosterior(str, Enum):
    """The form of a family's distribution over one weight (what a diagnosis may read from its
    moments)."""

    GAUSSIAN = "gaussian"  # N(mu, sigma^2), mean and std free (correlated or not)
    DROPOUT = "dropout"  # N(mu, alpha mu^2): the std tied to the mean through alpha
    SCALE = "scale"  # zero mean, a learned scale (the variance layers)
    POINT = "point"  # point weights (binary dropout acts on the inputs)


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
        weights: the form of its distribution over one weight.
        search_space: hyper-parameters of the family that a search varies besides the
            algorithm's: name -> (low, high) on a log scale (GD's fixed posterior std).
        config_defaults: values of the VI config (``regression.runs.VIConfig``) that the UCI engine
            gives this family where no tuned preset applies (GD's fixed posterior std: the
            config's 1e-4 makes GD a MAP fit that overfits; the tuned GD stds lie in 0.003-0.05).
        dense_covariance: whether a dense layer holds a full (I + 1) O x (I + 1) O covariance
            factor per model (``fc``): its memory grows with the square of the layer's weights
            (:meth:`covariance_elements`).
    """

    name: str
    layer: type[VariationalLayer]
    description: str
    options: Mapping[str, Any] = field(default_factory=dict)
    convolution: bool = True
    variational: bool = True
    closed_form_kl: bool = True
    weights: WeightPosterior = WeightPosterior.GAUSSIAN
    search_space: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    config_defaults: Mapping[str, float] = field(default_factory=dict)
    dense_covariance: bool = False

    @property
    def gaussian_prior(self) -> bool:
        """Whether the family's KL is to the Gaussian N(0, s^2) prior (its layers' default
        prior), so that a prior std is its hyper-parameter; the variational dropout and
        variance-layer families keep their log-uniform prior, and point weights have no KL."""
        return self.variational and isinstance(self.layer.default_prior, GaussianPrior)

    def covariance_elements(self, in_features: int, out_features: int) -> int:
        """Floats of one model's covariance factor in a dense layer with a bias:
        ((I + 1) O)^2 for a dense covariance, else 0 (the other families hold O(I O))."""
        return ((in_features + 1) * out_features) ** 2 if self.dense_covariance else 0

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
    FamilySpec(
        "gd",
        FixedVariance,
        "mean-field Gaussian with one fixed std (LRT)",
        search_space={"posterior_std": (1e-3, 1.0)},
        config_defaults={"posterior_std": GD_POSTERIOR_STD},
    ),
    FamilySpec(
        "fc",
        FullCovariance,
        "full-covariance Gaussian per layer",
        convolution=False,
        dense_covariance=True,
    ),
    FamilySpec(
        "fc-low-rank",
        LowRankCovariance,
        "Gaussian per layer, diagonal plus rank-r covariance (option rank)",
        convolution=False,
    ),
    FamilySpec(
        "point",
        Point,
        "point weights (ES, MAP, SGLD)",
        variational=False,
        weights=WeightPosterior.POINT,
    ),
    FamilySpec(
        "vd-layer",
        LayerDropout,
        "variational dropout, one alpha per layer",
        weights=WeightPosterior.DROPOUT,
    ),
    FamilySpec(
        "vd-neuron",
        NeuronDropout,
        "variational dropout, one alpha per output unit",
        weights=WeightPosterior.DROPOUT,
    ),
    FamilySpec(
        "vd-weight",
        WeightDropout,
        "variational dropout, one alpha per weight",
        weights=WeightPosterior.DROPOUT,
    ),
    FamilySpec("additive", Additive, "N(mu, sigma^2) with the dropout priors' KL through alpha"),
    FamilySpec(
        "zero-mean",
        ZeroMean,
        "Gaussian variance layer N(0, sigma^2)",
        weights=WeightPosterior.SCALE,
    ),
    FamilySpec(
        "bernoulli-variance",
        BernoulliVariance,
        "variance layer theta (2 Bernoulli(1/2) - 1)",
        closed_form_kl=False,
        weights=WeightPosterior.SCALE,
    ),
    FamilySpec(
        "uniform-variance",
        UniformVariance,
        "variance layer theta U(-1, 1)",
        weights=WeightPosterior.SCALE,
    ),
    FamilySpec(
        "dropout",
        BinaryDropout,
        "binary dropout (rate 0.5) on the input, point weights",
        {"rate": 0.5},
        variational=False,
        weights=WeightPosterior.POINT,
    ),
)

FAMILIES: Mapping[str, FamilySpec] = MappingProxyType({spec.name: spec for spec in _SPECS})


def family(name: str) -> FamilySpec:
    """The spec registered as ``name``; a ValueError lists the choices otherwise."""
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; choose from {', '.join(FAMILIES)}")
    return FAMILIES[name]
