"""Variational dropout: q(w) = N(mu, alpha mu^2), alpha shared per layer, output neuron or weight.

Sources: Neklyudov et al. 2019 eq. 14 (layer-wise, neuron-wise, weight-wise parameterizations),
appendix E eqs. 39 and 41 (local reparameterization, dense and convolutional):

    dense:  b_j = sum_i mu_ij a_i + eps_j sqrt( sum_i a_i^2 alpha_ij mu_ij^2 ),
    conv:   b_j = A * mu_j + eps_j (.) sqrt( A^2 * (alpha_j (.) mu_j^2) ),

eps independent per example (and per output position). Parameters: mu and log alpha (clipped to
``LOG_ALPHA_RANGE``); biases are point parameters (optional). Shapes of log alpha:

    sharing  dense (weight M, I, O)   conv over d spatial dims (weight M, O, C, *k)
    layer    (M, 1, 1)                (M, 1, 1, *[1] * d)
    neuron   (M, 1, O)                (M, O, 1, *[1] * d)
    weight   (M, I, O)                (M, O, C, *k)

and for a transposed convolution (weight M, C, O, *k) as for the dense layer, the output
channels on the third axis: (M, 1, 1, *[1] * d), (M, 1, O, *[1] * d), (M, C, O, *k).
"""

from __future__ import annotations

import math
from enum import Enum
from types import MappingProxyType
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from vbnn.core.contracts import ParameterRole
from vbnn.core.kernels import clamp_derivative, exponential
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import LOG_ALPHA_RANGE, VariationalLayer, clip_log_alpha
from vbnn.priors.kl import DropoutGaussian, kl_divergence
from vbnn.priors.log_uniform import LogUniformPrior

DEFAULT_LOG_ALPHA = -4.0  # initial log alpha (sqrt(alpha) ~ 0.14: std 14% of |mu|)


class AlphaSharing(str, Enum):
    LAYER = "layer"
    NEURON = "neuron"
    WEIGHT = "weight"


def log_alpha_shape(weight_shape: tuple[int, ...], sharing: AlphaSharing, output_axis: int):
    """Shape of log alpha for a weight of ``weight_shape`` whose output units lie along
    ``output_axis`` (``Operator.output_axis``; see the module docstring)."""
    if sharing is AlphaSharing.WEIGHT:
        return weight_shape
    shape = [weight_shape[0]] + [1] * (len(weight_shape) - 1)
    if sharing is AlphaSharing.NEURON:
        shape[output_axis] = weight_shape[output_axis]
    return tuple(shape)


class _DropoutVariance(torch.autograd.Function):
    """var = (alpha mu) mu with alpha = exp(clip(log alpha)) (broadcast over the weights that
    share it), its derivatives written out, since a training step takes it over every weight:

        dvar/dmu = alpha mu + mu alpha,    dvar/dlog alpha = alpha sum over the sharing weights
        of mu mu (0 where the clip, ``LOG_ALPHA_RANGE``, is active),

    each product taken in the order autograd takes the composite's, so the gradients are the
    composite's bit for bit, in fewer passes and without its clamp's boolean masks."""

    @staticmethod
    def forward(ctx, mean, log_alpha):  # type: ignore[no-untyped-def]
        alpha = exponential(log_alpha.clamp(*LOG_ALPHA_RANGE))
        alpha_mean = alpha * mean
        ctx.save_for_backward(mean, log_alpha, alpha, alpha_mean)
        return alpha_mean * mean

    @staticmethod
    @once_differentiable  # no second derivatives
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        mean, log_alpha, alpha, alpha_mean = ctx.saved_tensors
        grad_alpha_mean = grad * mean  # through var = alpha_mean * mean
        grad_mean = grad_log_alpha = None
        if ctx.needs_input_grad[0]:
            grad_mean = (grad * alpha_mean).add_(grad_alpha_mean * alpha)
        if ctx.needs_input_grad[1]:
            grad_alpha = (grad_alpha_mean * mean).sum_to_size(alpha.shape)
            grad_log_alpha = clamp_derivative(grad_alpha.mul_(alpha), log_alpha, *LOG_ALPHA_RANGE)
        return grad_mean, grad_log_alpha


class VariationalDropout(VariationalLayer):
    """Gaussian dropout posterior N(mu, alpha mu^2); dense, or a convolution with ``kernel_size``.

    The base of ``LayerDropout``, ``NeuronDropout`` and ``WeightDropout``, which say how alpha is
    shared (``sharing``); it is not built itself.

    Args:
        in_features: as ``VariationalLayer``.
        out_features: as ``VariationalLayer``.
        generators: as ``VariationalLayer``.
        dtype: parameter dtype (None: torch's default).
        log_alpha: initial log alpha of every weight (alpha = var / mu^2).
        **shell: kernel_size, stride, padding, dilation, bias (a point bias), num_models.
    """

    sharing: AlphaSharing  # one alpha per layer, per output neuron (channel) or per weight
    roles = MappingProxyType(
        {
            "weight_mean": ParameterRole.MEAN,
            "bias": ParameterRole.MEAN,
            "log_alpha": ParameterRole.LOG_ALPHA,
        }
    )
    default_prior: object = LogUniformPrior()  # Neklyudov et al. 2019 eq. 6

    # Parameters: the layer's shape, then the family's options, each a named parameter: the
    # registry reads a family's options from this signature (``FamilySpec.accepted_options``)
    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        *,
        log_alpha: float = DEFAULT_LOG_ALPHA,
        **shell: Any,
    ) -> None:
        if type(self) is VariationalDropout:
            raise TypeError(
                "VariationalDropout is the base of LayerDropout, NeuronDropout and "
                "WeightDropout (alpha per layer, output neuron or weight): build one of them"
            )
        super().__init__(in_features, out_features, generators, **shell)
        if not math.isfinite(log_alpha):
            raise ValueError(f"{type(self).__name__}: log_alpha must be finite, got {log_alpha}")
        self.point_bias(dtype)
        self.weight_mean = nn.Parameter(self.initial_mean(dtype))
        weight_shape = tuple(self.weight_mean.shape)
        shape = log_alpha_shape(weight_shape, self.sharing, self.operator.output_axis)
        self.log_alpha = nn.Parameter(torch.full(shape, log_alpha, dtype=self.weight_mean.dtype))

    def clipped_log_alpha(self) -> torch.Tensor:
        return clip_log_alpha(self.log_alpha)

    def weight_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_mean, _DropoutVariance.apply(self.weight_mean, self.log_alpha)

    def sample_weight(self, noise: NoiseSource) -> torch.Tensor:
        mean, var = self.weight_moments()
        eps = noise.randn(*mean.shape[1:], dtype=mean.dtype, device=mean.device)
        return mean + var.sqrt() * eps

    def kl(self, prior: object) -> torch.Tensor:
        """KL(q || prior) of the weights, (M,); biases are point parameters (no KL)."""
        return kl_divergence(DropoutGaussian(self.weight_mean, self.clipped_log_alpha()), prior)

    def mean_log_alpha(self) -> torch.Tensor:
        """Mean of log alpha over the layer's weights, per model (M,)."""
        log_alpha = torch.broadcast_to(self.clipped_log_alpha(), self.weight_mean.shape)
        return log_alpha.detach().reshape(self.num_models, -1).mean(1)


class LayerDropout(VariationalDropout):
    """Variational dropout with one alpha per layer."""

    sharing = AlphaSharing.LAYER
    family_name = "vd-layer"


class NeuronDropout(VariationalDropout):
    """Variational dropout with one alpha per output neuron (channel)."""

    sharing = AlphaSharing.NEURON
    family_name = "vd-neuron"


class WeightDropout(VariationalDropout):
    """Variational dropout with one alpha per weight."""

    sharing = AlphaSharing.WEIGHT
    family_name = "vd-weight"
