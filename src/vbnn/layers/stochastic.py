"""The shell shared by the variance-network families: one weight distribution, two operators.

A family of ``003_6d46223d87d84c68.txt`` (variational dropout, additive, zero-mean variance layers)
is a *distribution over the weight tensor*; the same distribution is used by a dense layer and by a
2-D convolution. This module holds the plumbing, so that each family module only says

* ``weight_moments()`` -> (mean, variance) of every weight (used by the LRT and by MEAN mode),
* ``sample_weight(generators)`` -> one weight draw per model,
* ``kl(prior)``.

Operators (the model dimension M is kept everywhere):

* dense: x (M, N, I), weight (M, I, O), bias (M, O) -> (M, N, O), ``x @ W + b``;
* conv2d: x (M, N, C, H, W), weight (M, O, C, kh, kw), bias (M, O) -> (M, N, O, H', W'); the M
  models are folded into the channel axis and convolved with ``groups=M``.

Local reparameterization trick (appendix E of 003, eqs. 39-42): for factorised Gaussian weights the
pre-activation of every example (and, for a convolution, every output position) is Gaussian with

    mean = A * mu + b,        variance = A^2 * var(W),

where * is the matrix product or the convolution and the square is elementwise, so SAMPLE draws
``mean + sqrt(variance) * eps`` with eps ~ N(0, 1) independent per example and per position.

Sparse ensembles and pruning (002, section 5; 003, Fig. 5) act through two optional boolean masks of
the weight shape: ``to_mean`` (weight replaced by its mean, no noise) and ``to_zero`` (weight set to
0). ``zero_mean_approximation`` replaces N(mu, var) by N(0, var) (003, Theorem 1).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional

from vbnn.core.contracts import DropoutPrior, ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.base import require_generators

# A variance is floored here before its square root: sqrt has an infinite derivative at 0 and an
# all-zero receptive field (MNIST borders) gives exactly zero output variance.
VARIANCE_FLOOR = 1e-16


class Operator:
    """Dense (``kernel_size=None``) or 2-D convolution (square kernel), stride 1, no padding."""

    def __init__(self, in_features: int, out_features: int, kernel_size: int | None) -> None:
        if in_features < 1 or out_features < 1:
            raise ValueError(f"layer sizes must be >= 1, got in={in_features}, out={out_features}")
        if kernel_size is not None and kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.in_features, self.out_features, self.kernel_size = (
            in_features,
            out_features,
            kernel_size,
        )

    @property
    def is_conv(self) -> bool:
        return self.kernel_size is not None

    def weight_shape(self, num_models: int) -> tuple[int, ...]:
        if self.kernel_size is None:
            return (num_models, self.in_features, self.out_features)
        k = self.kernel_size
        return (num_models, self.out_features, self.in_features, k, k)

    def fan_in(self) -> int:
        return self.in_features * (self.kernel_size or 1) ** 2

    def check(self, x: torch.Tensor, num_models: int) -> None:
        if self.kernel_size is None:
            ok = x.dim() == 3 and x.shape[0] == num_models and x.shape[2] == self.in_features
            expected = f"(M={num_models}, N, {self.in_features})"
        else:
            ok = x.dim() == 5 and x.shape[0] == num_models and x.shape[2] == self.in_features
            expected = f"(M={num_models}, N, {self.in_features}, H, W)"
        if not ok:
            raise ValueError(
                f"input of shape {tuple(x.shape)} does not fit this layer: expected {expected}"
            )

    def apply(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """x @ weight (+ bias) or the grouped convolution; see the module docstring for shapes."""
        if self.kernel_size is None:
            if bias is None:
                return torch.bmm(x, weight)
            return torch.baddbmm(bias.unsqueeze(1), x, weight)
        models, rows, channels, height, width = x.shape
        folded = x.transpose(0, 1).reshape(rows, models * channels, height, width)
        kernel = weight.reshape(models * self.out_features, channels, *weight.shape[-2:])
        flat_bias = None if bias is None else bias.reshape(-1)
        out = functional.conv2d(folded, kernel, flat_bias, groups=models)
        return out.reshape(rows, models, self.out_features, *out.shape[-2:]).transpose(0, 1)


class StochasticLayer(nn.Module):
    """Base of the dense and convolutional variance-network families (see module docstring).

    Subclasses set ``self.operator``, ``self.num_models``, ``self.bias`` (a point parameter or
    None) and implement ``weight_moments``, ``sample_weight`` and ``kl``. ``exact_lrt = False``
    (Bernoulli and uniform noise) makes SAMPLE draw one weight sample per model, shared by the
    examples, instead of the LRT.
    """

    exact_lrt = True
    point_parameter_names: tuple[str, ...] = ("bias",)

    def _setup(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators,
        kernel_size: int | None,
        bias: bool,
        dtype: torch.dtype,
    ) -> None:
        self.operator = Operator(in_features, out_features, kernel_size)
        self.in_features, self.out_features, self.kernel_size = (
            in_features,
            out_features,
            kernel_size,
        )
        self.num_models = len(generators)
        self.bias = nn.Parameter(torch.zeros(self.num_models, out_features, dtype=dtype))
        if not bias:
            self.bias = None
        self.zero_mean_approximation = False
        self.to_mean: torch.Tensor | None = None
        self.to_zero: torch.Tensor | None = None

    def initial_mean(self, generators: ModelGenerators, dtype: torch.dtype) -> torch.Tensor:
        """LeCun-normal N(0, 1/fan_in) weight means, one draw per model."""
        shape = self.operator.weight_shape(len(generators))
        return generators.randn(*shape[1:], dtype=dtype) / math.sqrt(self.operator.fan_in())

    # --- what a family implements ---------------------------------------------------------
    def weight_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def sample_weight(self, generators: ModelGenerators) -> torch.Tensor:
        raise NotImplementedError

    # --- masks and the zero-mean approximation, applied on top of the family ---------------
    def effective_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        mean, var = self.weight_moments()
        if self.zero_mean_approximation:
            mean = torch.zeros_like(mean)
        if self.to_mean is not None:
            var = torch.where(self.to_mean, torch.zeros_like(var), var)
        if self.to_zero is not None:
            mean = torch.where(self.to_zero, torch.zeros_like(mean), mean)
            var = torch.where(self.to_zero, torch.zeros_like(var), var)
        return mean, var

    def effective_sample(self, generators: ModelGenerators) -> torch.Tensor:
        weight = self.sample_weight(generators)
        if self.zero_mean_approximation:
            weight = weight - self.weight_moments()[0]
        if self.to_mean is not None:
            weight = torch.where(self.to_mean, self.effective_moments()[0], weight)
        if self.to_zero is not None:
            weight = torch.where(self.to_zero, torch.zeros_like(weight), weight)
        return weight

    def _bias(self) -> torch.Tensor | None:
        return self.bias

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode = ForwardMode.SAMPLE,
        generators: ModelGenerators | None = None,
    ) -> torch.Tensor:
        """Output (M, N, O) for dense, (M, N, O, H', W') for conv; see ``ForwardMode``."""
        self.operator.check(x, self.num_models)
        mode = ForwardMode(mode)
        if mode is ForwardMode.MEAN:
            return self.operator.apply(x, self.effective_moments()[0], self._bias())
        generators = require_generators(generators, mode)
        if mode is ForwardMode.WEIGHTS or not self.exact_lrt:
            return self.operator.apply(x, self.effective_sample(generators), self._bias())
        mean_weight, var_weight = self.effective_moments()
        mean = self.operator.apply(x, mean_weight, self._bias())
        var = self.operator.apply(x * x, var_weight, None)
        eps = generators.randn(*mean.shape[1:], dtype=x.dtype)
        return torch.addcmul(mean, var.clamp_min(VARIANCE_FLOOR).sqrt(), eps)

    def posterior_mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight mean (weight shape) and bias (M, O) (zeros when the layer has no bias)."""
        return self.weight_moments()[0], self._bias_or_zeros()

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight marginal std (weight shape); biases are point parameters: std 0."""
        return self.weight_moments()[1].sqrt(), torch.zeros_like(self._bias_or_zeros())

    def _bias_or_zeros(self) -> torch.Tensor:
        if self.bias is not None:
            return self.bias
        dtype = self.weight_moments()[0].dtype
        return torch.zeros(self.num_models, self.out_features, dtype=dtype)


# log alpha is clipped to this range for numerical safety. The upper end is wide enough for the
# "essentially infinite" alphas of a converged variance layer (003 section 4.3: alpha > 1e7, i.e.
# log alpha > 16); the lower end keeps alpha mu^2 from underflowing in float32.
LOG_ALPHA_RANGE = (-10.0, 20.0)


def clip_log_alpha(log_alpha: torch.Tensor) -> torch.Tensor:
    """log alpha clamped to ``LOG_ALPHA_RANGE`` (no gradient outside the range)."""
    return log_alpha.clamp(*LOG_ALPHA_RANGE)


def dropout_kl(prior: object, mean: torch.Tensor, log_alpha: torch.Tensor) -> torch.Tensor:
    """KL of N(mean, alpha mean^2) to ``prior``, (M,): ``kl_dropout`` if the prior has it, else
    the prior's ``kl_diagonal`` with std = sqrt(alpha) |mean| (e.g. a Gaussian prior)."""
    if isinstance(prior, DropoutPrior):
        return prior.kl_dropout(mean, log_alpha)
    std = torch.exp(0.5 * log_alpha) * mean.abs()
    return prior.kl_diagonal(mean, torch.broadcast_to(std, mean.shape))


def zero_mean_kl(prior: object, std: torch.Tensor) -> torch.Tensor:
    """KL of N(0, std^2) to ``prior``, (M,) (003 appendix F: constant for log-uniform / ARD)."""
    if isinstance(prior, DropoutPrior):
        return prior.kl_zero_mean(std)
    return prior.kl_diagonal(torch.zeros_like(std), std)
