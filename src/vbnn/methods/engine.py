"""The UCI engine's point-weight algorithms, which train on a regression table only.

``es`` (maximum likelihood stopped early on held-out rows), ``map`` (the log joint under the
Gaussian prior) and ``sgld`` (Langevin samples of the posterior, Welling & Teh 2011) train as
batched stacks of folds (``regression.engine``, ``regression.runs``); the families' VI runs there
too (``Method.engine``). None of the three trains a user's network in ``compare``: on a network,
``point`` is maximum likelihood with early stopping and ``vbnn.train(objective="map" / "sgld")``
runs the other two.
"""

from __future__ import annotations

from vbnn.methods.base import Method, PredictiveKind

ENGINE_ONLY = (
    Method(
        "es",
        "maximum likelihood, early stopped (UCI engine)",
        predictive=PredictiveKind.ENGINE,
        engine=True,
        network=False,
    ),
    Method(
        "map",
        "MAP under the Gaussian prior (UCI engine)",
        predictive=PredictiveKind.ENGINE,
        engine=True,
        network=False,
    ),
    Method(
        "sgld",
        "stochastic gradient Langevin dynamics (UCI engine)",
        predictive=PredictiveKind.ENGINE,
        engine=True,
        network=False,
    ),
)
