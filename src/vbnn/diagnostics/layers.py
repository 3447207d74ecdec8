"""Per-layer posterior diagnostics of any network holding family layers.

For every family layer of a module (in module order) this reads the marginal mean mu and std
sigma of each weight and reports:

* the signal-to-noise ratio SNR = |mu| / sigma of its weights (infinite at a point weight);
* the **pruned units** of Trippe & Turner (2017, section 3), layer by layer as
  ``diagnostics.layer_pruning`` counts them for an MLP: a unit (a dense output, or a
  convolution's output channel) is pruned when all its incoming weights and its bias sit at the
  prior, KL(q(w) || N(0, s^2)) < ``kl_threshold`` nats each, and all its outgoing weights in the
  next family layer are indistinguishable from zero, SNR < ``snr_threshold``. The next layer is
  the next family layer in module order when its inputs are this layer's outputs: same width
  (dense to dense, convolution to convolution), or a convolution's channels flattened into a
  dense layer (C x H x W inputs, channel-major, as ``nn.Flatten`` gives). Otherwise only the
  first condition is reported and ``pruned`` is None;
* for variational-dropout layers, the share of weights whose log alpha = log(sigma^2 / mu^2)
  exceeds 3 (alpha > e^3 ~ 20: weights whose noise swamps their mean, which sparse variational
  dropout removes; Molchanov et al. 2017).

The pruning rule concerns Gaussian weights under a Gaussian prior (``GAUSSIAN_FAMILIES``); for
other families the counts are left out (None) and the SNR still describes the layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from vbnn.core.defaults import PRIOR_STD
from vbnn.diagnostics.pruning import KL_THRESHOLD, SNR_THRESHOLD, kl_per_weight
from vbnn.layers.registry import FAMILIES, WeightPosterior
from vbnn.layers.shell import VariationalLayer

# families whose weights are Gaussian with a free mean, where the pruning rule applies, and those
# whose std is tied to the mean through alpha (``FamilySpec.weights``)
GAUSSIAN_FAMILIES = frozenset(
    name for name, spec in FAMILIES.items() if spec.weights is WeightPosterior.GAUSSIAN
)
DROPOUT_FAMILIES = frozenset(
    name for name, spec in FAMILIES.items() if spec.weights is WeightPosterior.DROPOUT
)
LOG_ALPHA_THRESHOLD = 3.0


@dataclass(frozen=True)
class LayerDiagnosis:
    """What one family layer's posterior says (see the module docstring).

    Attributes:
        name: the layer's name in ``module.named_modules()``.
        family: its family's registry name.
        kind: "dense" or "conv".
        units: output units (dense) or output channels (convolution).
        weights: number of weights (bias excluded).
        snr_quantiles: the 10 %, 50 % and 90 % quantiles of the weights' SNR.
        units_at_prior: units whose incoming weights and bias all sit at the prior (None where
            the rule does not apply).
        pruned: units also cut off from the next layer (None where it cannot be told).
        large_alpha_share: share of weights with log alpha > 3 (variational dropout; else None).
    """

    name: str
    family: str
    kind: str
    units: int
    weights: int
    snr_quantiles: tuple[float, float, float]
    units_at_prior: int | None
    pruned: int | None
    large_alpha_share: float | None

    def to_dict(self) -> dict:
        return {**self.__dict__, "snr_quantiles": list(self.snr_quantiles)}


def _unit_first(layer: VariationalLayer, values: torch.Tensor) -> torch.Tensor:
    """A weight-shaped tensor of one model as (units, incoming): dense (I, O) -> (O, I),
    transposed convolution (C, O, *k) -> (O, C prod(k))."""
    return values.movedim(layer.operator.output_axis - 1, 0).flatten(1)


def _outgoing(layer: VariationalLayer, following: VariationalLayer | None, values: torch.Tensor):
    """Outgoing weights of each unit of ``layer`` in ``following`` as (units, fan_out), or None
    when ``following`` does not read ``layer``'s outputs (module docstring)."""
    if following is None:
        return None
    units = layer.out_features
    if following.in_features == units:
        # dense (I, O) and transposed (C, O, *k): row j; conv (O, C, *k): input channel j
        return values.movedim(following.operator.input_axis - 1, 0).flatten(1)
    if layer.kernel_size is not None and following.kernel_size is None:
        positions, remainder = divmod(following.in_features, units)
        if remainder == 0:  # channel-major flatten: rows j * HW .. (j + 1) * HW
            return values.reshape(units, positions * values.shape[-1])
    return None


@dataclass(frozen=True)
class _Moments:
    """Marginal means and stds of one layer's weights and bias (None without a bias), float64,
    without the model dimension."""

    mean: torch.Tensor
    std: torch.Tensor
    bias_mean: torch.Tensor | None
    bias_std: torch.Tensor | None

    @classmethod
    def of(cls, layer: VariationalLayer) -> _Moments:
        mean, variance = (v.detach()[0].double() for v in layer.weight_moments())
        bias_mean, bias_variance = layer.bias_moments()
        if bias_mean is None:
            return cls(mean, variance.clamp_min(0).sqrt(), None, None)
        bias_mean = bias_mean.detach()[0].double()
        bias_std = (torch.zeros_like(bias_mean) if bias_variance is None
                    else bias_variance.detach()[0].double().clamp_min(0).sqrt())  # fmt: skip
        return cls(mean, variance.clamp_min(0).sqrt(), bias_mean, bias_std)


@torch.no_grad()
def diagnose_layers(
    module: nn.Module,
    prior_std: float = PRIOR_STD,
    snr_threshold: float = SNR_THRESHOLD,
    kl_threshold: float = KL_THRESHOLD,
) -> list[LayerDiagnosis]:
    """One ``LayerDiagnosis`` per family layer of ``module`` (one network, not a stack).

    Args:
        module: a network holding family layers (``vbnn.convert``, ``MLP``, ``LeNet5``, ...).
        prior_std: s of the N(0, s^2) prior that "at the prior" refers to.
        snr_threshold, kl_threshold: the pruning rule's thresholds (Trippe & Turner 2017).

    Raises:
        ValueError: ``module`` holds no family layer, is a stack of several models, or a
            threshold or ``prior_std`` is not positive.
    """
    for label, value in (("prior_std", prior_std), ("snr_threshold", snr_threshold),
                         ("kl_threshold", kl_threshold)):  # fmt: skip
        if not value > 0:
            raise ValueError(f"diagnose_layers: {label} must be > 0, got {value}")
    named = [(n, m) for n, m in module.named_modules() if isinstance(m, VariationalLayer)]
    if not named:
        raise ValueError(f"diagnose_layers: {type(module).__name__} holds no vbnn family layer")
    stacked = [n or type(m).__name__ for n, m in named if m.num_models != 1]
    if stacked:
        raise ValueError(
            f"diagnose_layers: layers {stacked} are stacks of several models; diagnose one "
            "network at a time"
        )
    moments = [_Moments.of(layer) for _, layer in named]
    out = []
    for index, (name, layer) in enumerate(named):
        mean, std = moments[index].mean, moments[index].std
        snr = torch.where(std > 0, mean.abs() / std, torch.full_like(mean, math.inf)).flatten()
        levels = torch.tensor([0.1, 0.5, 0.9], dtype=snr.dtype)
        huge = torch.finfo(snr.dtype).max  # quantile interpolates inf into nan
        quantiles = torch.quantile(snr.clamp_max(huge), levels)
        quantiles = torch.where(quantiles > 1e300, math.inf, quantiles)
        family = layer.family_name or type(layer).__name__
        at_prior = pruned = large_alpha = None
        if family in GAUSSIAN_FAMILIES:
            incoming = _unit_first(layer, kl_per_weight(mean, std, prior_std))
            bias_mean, bias_std = moments[index].bias_mean, moments[index].bias_std
            if bias_mean is not None:
                bias_kl = kl_per_weight(bias_mean, bias_std, prior_std)
                incoming = torch.cat([incoming, bias_kl.unsqueeze(1)], dim=1)
            unit_at_prior = incoming.nan_to_num(nan=math.inf).amax(dim=1) < kl_threshold
            at_prior = int(unit_at_prior.sum())
            following = named[index + 1][1] if index + 1 < len(named) else None
            if following is not None and following.family_name in GAUSSIAN_FAMILIES:
                out_mean = _outgoing(layer, following, moments[index + 1].mean)
                out_std = _outgoing(layer, following, moments[index + 1].std)
                if out_mean is not None:
                    silent = (out_mean.abs() < snr_threshold * out_std).all(dim=1)
                    pruned = int((unit_at_prior & silent).sum())
        if family in DROPOUT_FAMILIES:
            log_alpha = 2 * (std.log() - mean.abs().log())
            large_alpha = float((log_alpha > LOG_ALPHA_THRESHOLD).double().mean())
        out.append(
            LayerDiagnosis(
                name=name or type(layer).__name__,
                family=family,
                kind="dense" if layer.kernel_size is None else "conv",
                units=layer.out_features,
                weights=mean.numel(),
                snr_quantiles=tuple(float(q) for q in quantiles),
                units_at_prior=at_prior,
                pruned=pruned,
                large_alpha_share=large_alpha,
            )
        )
    return out
