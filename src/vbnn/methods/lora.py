"""Adapter entries: a low-rank adapter trained on the frozen pretrained network.

Each entry's ``prepare`` is ``vbnn.convert(network, family, adapter=run.adapter or LoRA())``
(``networks.adapter``): every targeted dense layer computes y = x W0^T + b0 + (alpha / r)
x A^T B^T with W0, b0 frozen, B = 0 at the start, so training begins at the pretrained function.

* ``lora``: ordinary LoRA (Hu et al. 2022), A and B point estimates trained by maximum
  likelihood and stopped early as ``point``; one pass predicts (K = 1).
* ``lora-ensemble``: M such adapters on the same pretrained network, each from its own draw of
  A and minibatch order (a deep ensemble of adapters, Wang et al. 2023); K = M.
* ``mf-lora``: BLoB (Wang et al. 2024): A mean-field Gaussian, B a point estimate, both by Adam
  on the ELBO, the KL that of A alone (with ``LoRA(variational="both")``, B is mean-field too).
* ``ivon-lora``: IVON-LoRA (Cong et al. 2024): A and B both mean-field (whatever the run's
  ``LoRA.variational``), trained by IVON at the run's settings (``vbnn.IVON``).
* ``laplace-lora``: Laplace-LoRA (Yang et al. 2024) through laplace-torch: ``lora``'s trained
  adapter, then a Laplace approximation over the parameters that require a gradient (A, B and a
  ``LoRA.trainable`` head; the pretrained weights are frozen), N(theta_MAP, (H + delta I)^-1)
  with H the diagonal of the generalised Gauss-Newton matrix of the training data and delta of
  the largest marginal likelihood, predicting by the linearised ("GLM") predictive as
  ``laplace`` does (``methods.laplace``). Diagonal rather than Yang et al.'s Kronecker factors:
  laplace-torch's KFAC backends take ``nn.Linear`` layers only, not the adapter's factors.

The variational entries predict with K weight draws of the adapter (``methods.variational``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from torch import nn

from vbnn.methods.base import Draw, Fitted, Method, PredictiveKind
from vbnn.methods.laplace import check_tensor_inputs, laplace_predictor
from vbnn.methods.point import point_samples
from vbnn.methods.variational import posterior_samples
from vbnn.networks.adapter import AdapterFactors, LoRA
from vbnn.networks.conversion import convert
from vbnn.training.natural_gradient import IVON
from vbnn.training.settings import Objective


@dataclass(frozen=True)
class Adapter(Method):
    """A LoRA adapter of ``family`` on the frozen network (module docstring).

    Attributes:
        factors: the variational factors this entry imposes on the run's ``LoRA`` (None: the
            run's as given).
    """

    pretrained: bool = True
    factors: AdapterFactors | None = None

    @property
    def objective(self) -> Objective:
        """Maximum likelihood for the point adapter, the ELBO for a variational one."""
        return Objective.LIKELIHOOD if self.family == "point" else Objective.ELBO

    def adapter(self, run: Any) -> LoRA:
        """The run's ``LoRA`` (``vbnn.LoRA()`` if it gives none), with this entry's factors."""
        settings = getattr(run, "adapter", None) or LoRA()
        return settings if self.factors is None else replace(settings, variational=self.factors)

    def prepare(self, network: nn.Module, run: Any = None) -> nn.Module:
        return convert(network, self.family, adapter=self.adapter(run))

    def train_options(self, run: Any, network: nn.Module) -> dict[str, Any]:
        if self.optimizer == "ivon":
            return {"optimizer": run.ivon or IVON()}
        return {"optimizer": self.optimizer}

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        if self.predictive is PredictiveKind.POINT:
            return partial(point_samples, fitted.network, run=run), 0.0
        return partial(posterior_samples, fitted.network, run=run, seed=seed), 0.0


@dataclass(frozen=True)
class LaplaceAdapter(Adapter):
    """``lora``'s adapter, then its diagonal Laplace (module docstring)."""

    def check(self, network: nn.Module, example: Any, run: Any) -> None:
        check_tensor_inputs(example)
        super().check(network, example, run)

    def predictor(self, fitted: Fitted, run: Any, seed: int) -> tuple[Draw, float]:
        return laplace_predictor(fitted, run, seed, weights="all", structure="diag")


ADAPTERS = (
    Adapter(
        "lora",
        "LoRA: a point adapter on the frozen network, early stopped",
        family="point",
        predictive=PredictiveKind.POINT,
        early_stopping=True,
    ),
    Adapter(
        "lora-ensemble",
        "deep ensemble of LoRA adapters on the same frozen network",
        family="point",
        predictive=PredictiveKind.POINT,
        ensemble=True,
        early_stopping=True,
    ),
    Adapter("mf-lora", "BLoB: the adapter's A mean-field, on the ELBO by Adam", family="mf"),
    Adapter(
        "ivon-lora",
        "IVON-LoRA: both adapter factors mean-field, by IVON",
        family="mf",
        optimizer="ivon",
        factors=AdapterFactors.BOTH,
    ),
    LaplaceAdapter(
        "laplace-lora",
        "Laplace-LoRA: lora's adapter, then its diagonal Laplace (laplace-torch)",
        family="point",
        predictive=PredictiveKind.LAPLACE,
        early_stopping=True,
    ),
)
