"""Natural-gradient mean-field VI: the improved variational online Newton step (IVON).

IVON (Shen et al. 2024, Algorithm 1) moves a factorised Gaussian posterior q(w) = N(m, sigma^2)
by a Newton-like step preconditioned with an online estimate h of the expected diagonal Hessian
of the loss. For the mean loss l(w) = -1/B sum_{n in B} log p(y_n | x_n, w) of a batch, a prior
N(0, s^2) on every weight and an effective sample size lambda, with delta = 1 / (lambda s^2):

    g_hat = dl/dw at w ~ q,              h_hat = g_hat (w - m) / sigma^2,
    g     <- beta1 g + (1 - beta1) g_hat,
    h     <- beta2 h + (1 - beta2) h_hat + (1 - beta2)^2 / 2 (h - h_hat)^2 / (h + delta),
    m     <- m - alpha (h0 + delta) clip((g / (1 - beta1^t) + delta m) / (h + delta), +-r),
    sigma <- 1 / sqrt(lambda (h + delta)),

from h = h0 (``hess_init``) and g = 0. The third term of h's update keeps h + delta > 0 (Lin et
al. 2020); the factor (h0 + delta) of the step size is ivon-opt's ``rescale_lr``, so that alpha
is on the scale of SGD's. With lambda = N, the data set's size, the fixed point is the ELBO's
mean-field optimum (with lambda < N a tempered posterior): ``prior_weight_decay`` is the one
rule linking the prior to the step, delta = prior precision / lambda.

What is vbnn's own here. ivon-opt (the reference implementation) keeps the posterior in the
optimiser: it swaps sampled weights into plain parameters around each forward pass and draws the
noise from torch's global RNG. vbnn's layers hold the posterior themselves (a mean and a std
parameter each), draw their own noise from per-model streams (``core.randomness``) and
estimate the gradient by the LRT or one draw per batch. So the step is written here against
those layers (``GaussianWeights``): h_hat comes from the std's gradient by Price's theorem,
d E_q[l] / d sigma = sigma E_q[d^2 l / dw^2], whose one-sample estimate
(dl/dsigma) / sigma equals g_hat (w - m) / sigma^2 for a weight draw w = m + sigma eps and
remains unbiased under the LRT. The std written after each step is the layer's std, so sampling,
``vbnn.summary``, ``diagnose``, save and load see the posterior as it is. Parameters outside the
Gaussian layers (normalisation layers, a likelihood's noise std, point layers) are point
estimates moved by Adam.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.optim.adam import adam

from vbnn.core.contracts import ParameterRole, Prior
from vbnn.core.defaults import (
    IVON_ATTENTION_CLIP_RADIUS,
    IVON_ATTENTION_LEARNING_RATE,
    IVON_CLIP_RADIUS,
    IVON_HESS_INIT,
    IVON_LEARNING_RATE,
)
from vbnn.layers.gaussian_weights import GaussianWeights
from vbnn.layers.shell import VariationalLayer
from vbnn.priors.gaussian import GaussianPrior


def prior_weight_decay(prior_std: float | torch.Tensor, ess: float) -> float | torch.Tensor:
    """delta = 1 / (ess prior_std^2): the weight decay of IVON whose step has the prior
    N(0, prior_std^2) (prior precision = ess x weight decay; ess = N gives the ELBO)."""
    return 1.0 / (ess * prior_std**2)


def initial_std(
    hess_init: float, weight_decay: float | torch.Tensor, ess: float, like: torch.Tensor
) -> torch.Tensor:
    """sigma_0 = 1 / sqrt(ess (h0 + delta)): the std every Gaussian weight starts from, in the
    dtype and on the device of ``like``."""
    precision = torch.as_tensor(ess * (hess_init + weight_decay), dtype=like.dtype)
    return precision.to(like.device).rsqrt()


class VariationalOnlineNewton(torch.optim.Optimizer):
    """IVON (module docstring) over the ``GaussianWeights`` of vbnn's layers, Adam on the rest.

    Param groups: one per Gaussian tensor, ``params = [mean, raw std]`` with its ``weight_decay``
    delta (per model of a stack: a (M,) prior std gives a (M,) delta); then one group of point
    parameters (``point=True``) with Adam's ``lr``. The trainer's schedule scales every group's
    ``lr``. State per mean: ``momentum`` g, ``hessian`` h, ``step``; per point parameter, Adam's.

    The arguments are what is moved, then IVON's hyper-parameters in the order of Shen et al.
    2024's Algorithm 1, each named as a keyword.

    Args:
        gaussians: the Gaussian tensors to move by IVON, each with its delta.
        points: parameters to move by Adam.
        learning_rate: alpha.
        ess: lambda.
        hess_init: h0 (every sigma is reset to ``initial_std`` on construction).
        beta1: the averaging factor of the momentum g.
        beta2: the averaging factor of the Hessian estimate h.
        clip_radius: r (inf: no clipping).
        point_learning_rate: Adam's step size for ``points``.
    """

    def __init__(
        self,
        gaussians: Sequence[tuple[GaussianWeights, float | torch.Tensor]],
        points: Sequence[nn.Parameter],
        *,
        learning_rate: float,
        ess: float,
        hess_init: float,
        beta1: float,
        beta2: float,
        clip_radius: float,
        point_learning_rate: float,
    ) -> None:
        groups: list[dict] = []
        for tensor, delta in gaussians:
            decay = delta.tolist() if isinstance(delta, torch.Tensor) else float(delta)
            groups.append(
                {
                    "params": [tensor.mean, tensor.raw],
                    "weight_decay": decay,
                    "lr": learning_rate,
                    "point": False,
                }
            )
        if points:
            groups.append({"params": list(points), "lr": point_learning_rate, "point": True})
        defaults = {
            "ess": ess,
            "hess_init": hess_init,
            "beta1": beta1,
            "beta2": beta2,
            "clip_radius": clip_radius,
        }
        super().__init__(groups, defaults)
        self.gaussians = [tensor for tensor, _ in gaussians]
        for tensor, group in zip(self.gaussians, self.param_groups, strict=False):
            delta = self._delta(group, tensor.mean)
            tensor.set_std(initial_std(hess_init, delta, ess, tensor.mean).expand_as(tensor.raw))

    @staticmethod
    def _delta(group: dict, mean: torch.Tensor) -> torch.Tensor | float:
        decay = group["weight_decay"]
        if isinstance(decay, list):  # one delta per model of a stack
            return torch.tensor(decay, dtype=mean.dtype, device=mean.device).view(
                -1, *[1] * (mean.dim() - 1)
            )
        return decay

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        for group, tensor in zip(self.param_groups, self.gaussians, strict=False):
            self._newton_step(group, tensor)
        for group in self.param_groups[len(self.gaussians) :]:
            self._adam_step(group)

    def _newton_step(self, group: dict, tensor: GaussianWeights) -> None:
        mean, delta = tensor.mean, self._delta(group, tensor.mean)
        state = self.state[mean]
        if not state:
            state["step"] = 0
            state["momentum"] = torch.zeros_like(mean)
            state["hessian"] = torch.full_like(mean, group["hess_init"])
        state["step"] += 1
        gradient = mean.grad if mean.grad is not None else torch.zeros_like(mean)
        curvature = tensor.curvature()  # h_hat, by Price's theorem
        beta1, beta2, hessian = group["beta1"], group["beta2"], state["hessian"]
        momentum, bias = state["momentum"], 1.0 - beta1 ** state["step"]
        momentum.lerp_(gradient, 1.0 - beta1)
        # h <- beta2 h + (1 - beta2) h_hat + (1 - beta2)^2 / 2 (h - h_hat)^2 / (h + delta), in
        # place and in few passes (the step is element-wise over every weight: each pass counts)
        scale = hessian + delta
        difference = torch.sub(hessian, curvature).square_()
        hessian.mul_(beta2).add_(curvature, alpha=1.0 - beta2)
        hessian.addcdiv_(difference, scale, value=0.5 * (1.0 - beta2) ** 2)
        torch.add(hessian, delta, out=scale)  # h + delta after the update
        # m <- m - alpha (h0 + delta) clip((g / bias + delta m) / (h + delta)): the numerator
        # times bias is g + delta bias m
        if isinstance(delta, torch.Tensor):  # one delta per model of a stack
            numerator = torch.addcmul(momentum, mean, delta * bias)
        else:
            numerator = torch.add(momentum, mean, alpha=delta * bias)
        rate = group["lr"] * (group["hess_init"] + delta)
        radius = group["clip_radius"]
        if isinstance(rate, torch.Tensor):  # one rate per model of a stack
            direction = numerator.div_(scale).div_(bias).clamp_(-radius, radius)
            mean.sub_(direction.mul_(rate))
        elif math.isinf(radius):
            mean.addcdiv_(numerator, scale, value=-rate / bias)
        else:  # clip(n / (scale bias), r) = clip(n / scale, r bias) / bias: one pass fewer
            direction = numerator.div_(scale).clamp_(-radius * bias, radius * bias)
            mean.add_(direction, alpha=-rate / bias)
        tensor.set_std(scale.mul_(group["ess"]).rsqrt_())  # sigma = 1 / sqrt(ess (h + delta))

    def _adam_step(self, group: dict) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        for p in params:
            if not self.state[p]:
                self.state[p].update(
                    step=torch.tensor(0.0),
                    exp_avg=torch.zeros_like(p),
                    exp_avg_sq=torch.zeros_like(p),
                )
        states = [self.state[p] for p in params]
        adam(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            [s["step"] for s in states],
            amsgrad=False,
            beta1=0.9,
            beta2=0.999,
            lr=group["lr"],
            weight_decay=0.0,
            eps=1e-8,
            maximize=False,
        )


@dataclass(frozen=True)
class IVON:
    """``vbnn.train(..., optimizer=IVON(...))``: the settings of ``VariationalOnlineNewton``.

    Defaults are Shen et al. 2024's and ivon-opt's, except alpha = 0.7 with the clip radius
    r = 0.005 and ivon-opt's ``hess_init`` 1.0 (sigma_0 = 1 / sqrt(N (1 + delta)), 0.01 on 10,000
    examples), chosen on validation images of ``vbnn compare``'s networks (``core.defaults``:
    ``IVON_LEARNING_RATE``, ``IVON_CLIP_RADIUS``, ``IVON_HESS_INIT``, with the numbers). Attention
    networks whose run stays near chance at these take ``IVON.for_attention()``.

    Attributes:
        learning_rate: alpha, the step of the means (ivon-opt's ``lr``: Shen et al. use 0.1 to
            0.5 on image classifiers).
        ess: lambda; None: the training set's size N, i.e. the ELBO. A smaller ess widens the
            posterior (the likelihood counted ess / N times: a tempered posterior).
        hess_init: h0, the initial diagonal Hessian estimate.
        beta1: the momentum of the gradient.
        beta2: the averaging factor of the Hessian estimate.
        clip_radius: r, the bound of every preconditioned step: no mean moves more than
            alpha (h0 + delta) r a step (inf: no bound, ivon-opt's default).
        point_learning_rate: Adam's step size for the parameters outside the Gaussian layers;
            None: ``vbnn.train``'s ``learning_rate``.

    The prior is ``vbnn.train``'s ``prior`` (None: each layer's default N(0, 1)): its std s
    gives each layer's weight decay delta = 1 / (ess s^2) (``prior_weight_decay``), so the
    prior is set in one place, not as a second knob.
    """

    includes_prior: ClassVar[bool] = True  # the objective's KL enters as the weight decay
    learning_rate: float = IVON_LEARNING_RATE
    ess: float | None = None
    hess_init: float = IVON_HESS_INIT
    beta1: float = 0.9
    beta2: float = 0.99999
    clip_radius: float = IVON_CLIP_RADIUS
    point_learning_rate: float | None = None

    def __post_init__(self) -> None:
        for name in ("learning_rate", "hess_init", "clip_radius"):
            if not getattr(self, name) > 0:
                raise ValueError(f"IVON: {name} must be > 0, got {getattr(self, name)}")
        if self.ess is not None and not self.ess > 0:
            raise ValueError(
                f"IVON: ess must be > 0 (or None: the data set's size), got {self.ess}"
            )
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"IVON: {name} must be in [0, 1), got {getattr(self, name)}")

    @classmethod
    def for_attention(cls, **changes: float | None) -> IVON:
        """The settings for attention networks (transformers): alpha = 5.0, r = 0.0007.

        Within a few thousand steps h stays near h0, so IVON's step is alpha times the averaged
        gradient (clipped): SGD with momentum, not scaled per weight as Adam's. A transformer's
        query and key weights can start with gradients thousands of times smaller than a CNN's
        (the attention is near uniform at initialisation), and at the defaults they barely move.
        Here every step within the bound is 5 / 0.7 times the defaults', and the bound is
        tightened so that the largest, alpha (h0 + delta) r, stays the defaults' 0.0035. Chosen on
        validation sequences of a tiny BERT (``benchmarks/ivon_attention.py``); on CNNs and
        MLPs, and on the tiny GPT-2 language model there, the defaults are the better choice.

        Args:
            **changes: any other field of ``IVON`` (e.g. ``ess``, ``hess_init``).
        """
        changes.setdefault("learning_rate", IVON_ATTENTION_LEARNING_RATE)
        changes.setdefault("clip_radius", IVON_ATTENTION_CLIP_RADIUS)
        return cls(**changes)

    # Parameters: what is trained, then what the trainer knows of the run
    def build(
        self,
        network: nn.Module,
        likelihood: nn.Module,
        *,
        learning_rate: float,
        rates: Mapping[ParameterRole, float | None],
        prior: Prior | None,
        dataset_size: int,
    ) -> VariationalOnlineNewton:
        """The optimiser of ``network``'s Gaussian layers and its other parameters.

        Raises:
            ValueError: a family layer with a KL but no ``gaussian_weights`` (its KL would be
                lost), a prior other than a ``GaussianPrior`` (the message names the layer),
                or per-role ``rates`` (Adam's).
        """
        if any(rate is not None for rate in rates.values()):
            raise ValueError(
                "optimizer 'ivon': TrainerConfig.rates sets Adam's per-role step sizes; IVON's "
                "are IVON(learning_rate=, point_learning_rate=)"
            )
        ess = float(self.ess if self.ess is not None else dataset_size)
        gaussians = _gaussian_tensors(network, prior, ess)
        moved = {id(p) for tensor, _ in gaussians for p in (tensor.mean, tensor.raw)}
        points = [
            p
            for module in (network, likelihood)
            for p in module.parameters()
            if p.requires_grad and id(p) not in moved
        ]
        point_rate = learning_rate if self.point_learning_rate is None else self.point_learning_rate
        return VariationalOnlineNewton(
            gaussians,
            points,
            learning_rate=self.learning_rate,
            ess=ess,
            hess_init=self.hess_init,
            beta1=self.beta1,
            beta2=self.beta2,
            clip_radius=self.clip_radius,
            point_learning_rate=point_rate,
        )


def _gaussian_tensors(
    network: nn.Module, prior: Prior | None, ess: float
) -> list[tuple[GaussianWeights, float | torch.Tensor]]:
    """The Gaussian tensors of ``network``'s family layers, each with its weight decay delta
    (``prior_weight_decay`` of its layer's Gaussian prior); ValueError as ``IVON.build``."""
    gaussians: list[tuple[GaussianWeights, float | torch.Tensor]] = []
    for name, layer in network.named_modules():
        if not isinstance(layer, VariationalLayer):
            continue
        tensors = layer.gaussian_weights()
        if not tensors and layer.has_kl:
            raise ValueError(
                f"optimizer 'ivon': layer {name or type(network).__name__!r} is "
                f"{type(layer).__name__} (family {layer.family_name!r}), not a mean-field "
                "Gaussian; IVON moves 'mf' layers (vbnn.convert(net, 'mf')), other "
                "families train with optimizer='adam'"
            )
        layer_prior = prior if prior is not None else layer.default_prior
        if tensors and not isinstance(layer_prior, GaussianPrior):
            raise ValueError(
                f"optimizer 'ivon': layer {name!r} has prior {type(layer_prior).__name__}; "
                "IVON's weight decay is a Gaussian prior's (GaussianPrior(std))"
            )
        for tensor in tensors:
            gaussians.append((tensor, prior_weight_decay(layer_prior.std, ess)))
    return gaussians
