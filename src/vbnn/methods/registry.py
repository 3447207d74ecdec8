"""``METHODS``: every method by name, the one table that ``vbnn.compare`` reads.

Each ``vbnn.FAMILIES`` name is its posterior trained on the ELBO by Adam; the baselines follow.
A name with the suffix ``+ts`` is that classifier method temperature-scaled on held-out
examples (``methods.temperature``); ``lora``, ``lora-ensemble``, ``mf-lora``, ``ivon-lora``
and ``laplace-lora`` train a low-rank adapter on the frozen network (``methods.lora``). Adding a
method: one module (a ``Method`` subclass that overrides what differs: ``train_options``,
``check``, ``predictor``) and one line below.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from vbnn.layers.registry import FAMILIES
from vbnn.methods.base import Method, PredictiveKind
from vbnn.methods.engine import ENGINE_ONLY
from vbnn.methods.laplace import Laplace
from vbnn.methods.lora import ADAPTERS
from vbnn.methods.mc_dropout import MCDropout
from vbnn.methods.point import Point
from vbnn.methods.swag import SWAG
from vbnn.methods.temperature import SUFFIX, TemperatureScaled
from vbnn.methods.variational import Variational

POINT = PredictiveKind.POINT
_BASELINES = (
    Point(
        "point",
        "maximum likelihood, early stopped",
        predictive=POINT,
        early_stopping=True,
        engine=True,
    ),
    Point(
        "ensemble",
        "deep ensemble of point networks",
        predictive=POINT,
        ensemble=True,
        early_stopping=True,
    ),
    MCDropout(
        "mc-dropout",
        "MC dropout: the network's dropout active at test time",
        predictive=PredictiveKind.MC_DROPOUT,
    ),
    Laplace(
        "laplace",
        "last-layer KFAC Laplace of the point network (laplace-torch)",
        predictive=PredictiveKind.LAPLACE,
        early_stopping=True,
    ),
    Variational("ivon", "mean-field posterior by IVON", family="mf", optimizer="ivon"),
    Variational(
        "ivon-ensemble", "ensemble of IVON posteriors", family="mf", optimizer="ivon", ensemble=True
    ),
    SWAG("swag", "SWAG over SGD iterates", predictive=PredictiveKind.SWAG),
    SWAG(
        "multiswag",
        "MultiSWAG: an ensemble of SWAG posteriors",
        predictive=PredictiveKind.SWAG,
        ensemble=True,
    ),
    *ADAPTERS,
    *ENGINE_ONLY,
)

METHODS: Mapping[str, Method] = MappingProxyType(
    {
        **{
            name: Variational(name, spec.description, family=name, engine=True)
            for name, spec in FAMILIES.items()
        },
        **{method.name: method for method in _BASELINES},
    }
)


def method(name: str) -> Method | TemperatureScaled:
    """The method called ``name`` (``NAME+ts``: ``NAME`` temperature-scaled).

    Raises:
        ValueError: an unknown name (the known ones listed).
    """
    base = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    if base not in METHODS:
        raise ValueError(
            f"unknown method {name!r}; choose from {list(METHODS)} (each may take "
            f"the suffix {SUFFIX!r}: temperature-scaled)"
        )
    return TemperatureScaled(METHODS[base]) if base != name else METHODS[base]


def base_method(name: str) -> Method:
    """The method that trains entry ``name`` (``NAME+ts``: ``NAME``'s)."""
    chosen = method(name)
    return chosen.base if isinstance(chosen, TemperatureScaled) else chosen
