"""The family shell: one distribution over a weight tensor, applied through one of two operators.

A variational family is a distribution q over the weight tensor (and the bias) of one layer. Each
family module states only

* ``weight_moments()`` -> (mean, variance) of every weight (the LRT and MEAN mode use them),
* ``bias_moments()`` -> (mean, variance or None) of the bias (default: a point bias),
* ``sample(noise)`` -> one (weight, bias) draw per model,
* ``kl(prior)`` -> KL(q || prior), one value per model,

and the shell below owns everything else: the forward modes, the operators, the local
reparameterization trick (LRT), masks for sparse ensembles, single models and stacks.

Operators (``layers.operators.Operator``): dense, or a 1-, 2- or 3-D convolution (the rank of
``kernel_size``; stride, padding, dilation as ``nn.Conv1d`` / ``nn.Conv2d`` / ``nn.Conv3d``), or,
with ``transposed=True``, a transposed convolution (``output_padding`` too, and ``output_size`` in
``forward``, as ``nn.ConvTranspose1d`` / ``2d`` / ``3d``), with a leading model dimension M inside
the shell.

Single models and stacks. A layer built without ``generators`` or ``num_models`` is one network
and behaves like ``nn.Linear`` / ``nn.ConvNd`` / ``nn.ConvTransposeNd``: (*, I) or (N, C, *S) in,
no model dimension in or out (its parameters keep a leading dimension of size 1, so that it
equals the M = 1 stack exactly). A stack (``generators`` a ``ModelGenerators`` of M streams, or
``num_models=M``) takes and returns the leading M.

Forward modes (``ForwardMode``): an explicit ``mode`` argument wins; else the mode set on the
layer by ``vbnn.mode``; else TRAINING in training mode and MEAN in eval mode, like dropout.
TRAINING is the layer's ``training_mode``: its estimator of the objective's gradient, chosen in one
place (``default_training_mode``) by the kind of layer, and settable per layer (the
``training_mode`` argument, which ``vbnn.convert`` passes on).

Randomness: noise comes from the ``noise`` argument (a ``NoiseSource``, e.g. a ``ModelGenerators``:
one stream per model, so a model draws the same numbers alone or in a stack), else from the source
set on the layer by ``use_noise``, else from torch's global RNG; every draw lands on the device
and dtype of the input.

Local reparameterization trick (Kingma et al. 2015; appendix E of Neklyudov et al. 2019, eqs.
39-42): for factorised Gaussian weights the pre-activation of every example (and output position)
is Gaussian with

    mean = A * mu_W + mu_b,        variance = A^2 * var(W) + var(b),

where * is the matrix product, the convolution or the transposed convolution (each output a sum
of products of independent weights with the inputs) and the square is elementwise, so LOCAL draws
``mean + sqrt(variance) * eps`` with eps ~ N(0, 1) independent per example and position. Families
whose noise is not Gaussian or not factorised set ``exact_lrt = False``: LOCAL then draws one
weight sample per model, shared by the examples.

Sparse ensembles and pruning (Neklyudov et al. 2018 section 5; Neklyudov et al. 2019 Fig. 5) act
through two optional boolean masks of the weight shape: ``to_mean`` (weight replaced by its mean, no
noise) and ``to_zero`` (weight set to 0). The ZERO_MEAN mode replaces N(mu, var) by N(0, var)
(Neklyudov et al. 2019, Theorem 1) in the families whose weights have such a distribution;
families with ``has_zero_mean_form = False`` (point weights, binary dropout) sample as in WEIGHTS,
as the theorem does not concern them.

Parameter roles: ``roles`` maps the names of a family's parameters to a ``ParameterRole``
(parameters not named are WEIGHTS): MEAN for those ``means()`` reads, CORRELATION, LOG_ALPHA.
``training.optimizer`` reads it (``learning_rate_groups``, ``parameters_with_role``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode, ParameterRole, Prior
from vbnn.core.defaults import PRIOR_STD
from vbnn.core.kernels import clip, gaussian_from_moments
from vbnn.core.randomness import ModelGenerators, NoiseSource, TorchNoise
from vbnn.layers.gaussian_weights import GaussianWeights
from vbnn.layers.operators import Operator
from vbnn.priors.gaussian import GaussianPrior

# A variance is floored here before its square root: sqrt has an infinite derivative at 0 and an
# all-zero receptive field (MNIST borders) gives exactly zero output variance.
VARIANCE_FLOOR = 1e-16

Moments = tuple[torch.Tensor, torch.Tensor]


class VariationalLayer(nn.Module):
    """The shell of every family (see the module docstring).

    Args:
        in_features: I (input channels for a convolution).
        out_features: O (output channels for a convolution).
        generators: a ``ModelGenerators`` of M streams: a stack of M models, initialised from
            those streams; a ``torch.Generator``: one model initialised from it; None: one model
            (or ``num_models``) initialised from torch's global RNG.
        kernel_size: None: a dense layer; an int: a 2-D convolution with a square kernel, as
            ``nn.Conv2d``; a tuple of 1, 2 or 3 ints: a convolution of that many spatial
            dimensions d (``(5,)`` is ``nn.Conv1d(..., 5)``).
        stride: of the convolution, an int or d ints, as torch's convolutions.
        padding: of the convolution, an int, d ints, "valid" or "same" (stride 1).
        dilation: of the convolution, an int or d ints.
        transposed: a transposed convolution (``nn.ConvTranspose1d`` / ``2d`` / ``3d``), weight
            (M, I, O, *k); needs ``kernel_size``.
        output_padding: of a transposed convolution, an int or d ints.
        bias: whether the layer has a bias.
        num_models: stack size when no ``generators`` are given (None: a single model).
    """

    exact_lrt = True
    has_zero_mean_form = True  # False: ZERO_MEAN samples the layer as WEIGHTS does
    has_weight_mean = True  # False: every weight mean is 0 (variance layers), the LRT skips x mu
    has_kl = True  # False: point weights or the dropout baseline (KL 0, no term in the ELBO)
    default_prior: object = GaussianPrior(PRIOR_STD)  # the prior ``vbnn.kl`` uses when given none
    # parameter name -> its role (module docstring); unnamed ones are WEIGHTS
    roles: Mapping[str, ParameterRole] = MappingProxyType({})
    family_name = ""

    # Parameters: the layer's shape and the convolution options every family shares, keyword-only
    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        *,
        kernel_size: int | tuple[int, ...] | None = None,
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, ...] = 1,
        transposed: bool = False,
        output_padding: int | tuple[int, ...] = 0,
        bias: bool = True,
        num_models: int | None = None,
        training_mode: ForwardMode | str | None = None,
    ) -> None:
        super().__init__()
        self.operator = Operator(
            in_features, out_features, kernel_size, stride, padding, dilation, transposed,
            output_padding,
        )  # fmt: skip
        self.in_features, self.out_features = in_features, out_features
        self.kernel_size = self.operator.kernel_size
        self.has_bias = bias
        if isinstance(generators, ModelGenerators):
            if num_models is not None and num_models != len(generators):
                raise ValueError(
                    f"num_models={num_models} disagrees with {len(generators)} generators"
                )
            self.stacked, self.num_models = True, len(generators)
            self.init_noise: NoiseSource = generators
        else:
            if num_models is not None and num_models < 1:
                raise ValueError(f"num_models must be >= 1, got {num_models}")
            self.stacked, self.num_models = num_models is not None, num_models or 1
            self.init_noise = TorchNoise(self.num_models, generators)
        self.forced_mode: ForwardMode | None = None  # set by ``vbnn.mode``
        self.training_mode = training_mode or default_training_mode(self.operator)
        self.shared_noise: NoiseSource | None = None  # set by ``use_noise``
        self.to_mean: torch.Tensor | None = None
        self.to_zero: torch.Tensor | None = None

    # --- construction helpers ---------------------------------------------------------------
    def initial_mean(self, dtype: torch.dtype | None, gain: float = 1.0) -> torch.Tensor:
        """Weight means N(0, gain / fan_in) (LeCun normal; He normal with gain 2), per model;
        ``Operator.fan_in`` says what fan_in is for each operator."""
        dtype = dtype or torch.get_default_dtype()
        shape = self.operator.weight_shape(self.num_models)
        draw = self.init_noise.randn(*shape[1:], dtype=dtype)
        # Each case in the fewest float roundings: gain 1 (LeCun) divides the draw by
        # sqrt(fan_in); another gain (He: 2) multiplies it by sqrt(gain / fan_in), one square root
        if gain == 1.0:
            return draw / math.sqrt(self.operator.fan_in())
        return draw * math.sqrt(gain / self.operator.fan_in())

    def zeros_bias(self, dtype: torch.dtype | None) -> torch.Tensor:
        return torch.zeros(self.num_models, self.out_features, dtype=dtype)

    def point_bias(self, dtype: torch.dtype | None) -> None:
        """Register ``bias``: a point parameter (M, O) at zero, or None without a bias."""
        self.bias = nn.Parameter(self.zeros_bias(dtype)) if self.has_bias else None

    # --- what a family implements -------------------------------------------------------------
    def weight_moments(self) -> Moments:
        """(mean, variance) of every weight, each of the weight shape."""
        raise NotImplementedError

    def bias_moments(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(mean, variance) of the bias, (M, O) each; variance None for a point bias."""
        return getattr(self, "bias", None), None

    def sample(self, noise: NoiseSource) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One (weight, bias) draw per model; the default draws the weight, keeps a point bias."""
        return self.sample_weight(noise), self.bias_moments()[0]

    def sample_weight(self, noise: NoiseSource) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, prior: Prior) -> torch.Tensor:
        """KL(q || prior) of this layer's distribution, one value per model: (M,)."""
        raise NotImplementedError

    def gaussian_weights(self) -> tuple[GaussianWeights, ...]:
        """The layer's factorised Gaussian parameter tensors with a learned std (mean and std
        each a parameter), for natural-gradient optimisers; () for a family of another form."""
        return ()

    def log_prior(self, prior: Prior) -> torch.Tensor:
        """log p(W) + log p(b) at the posterior means, one value per model: (M,).

        For point weights this is the log prior of the weights (the MAP objective's prior term);
        for any other family it is the log prior of its mean network (the weights MEAN mode uses),
        not an expectation under q.
        """
        weight, bias = self.means()
        total = prior.log_prob(weight)
        return total if bias is None else total + prior.log_prob(bias)

    def means(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight mean, bias mean or None); families override it when the moments cost more."""
        return self.weight_moments()[0], self.bias_moments()[0]

    @torch.no_grad()
    def load_means(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Set the posterior means from a deterministic layer's weights, for every model.

        Args:
            weight: ``nn.Linear`` layout (O, I), ``nn.ConvNd`` layout (O, C, *k) or
                ``nn.ConvTransposeNd`` layout (C, O, *k).
            bias: (O,) or None (the layer's bias is then left as it is).

        Families without a weight mean (zero-mean variance layers) keep their own weights and
        take the bias only.
        """
        expected = self.operator.torch_weight_shape()
        if tuple(weight.shape) != expected:
            raise ValueError(
                f"load_means: weight {tuple(weight.shape)}, expected {expected} for this "
                f"{self.operator.kind} layer"
            )
        dense = self.operator.from_torch(weight)
        target = getattr(self, "weight_mean", None)
        target = getattr(self, "weight", None) if target is None else target
        if target is not None:
            target.copy_(dense.expand_as(target))
        mean_bias = getattr(self, "bias_mean", None)
        mean_bias = getattr(self, "bias", None) if mean_bias is None else mean_bias
        if bias is not None and mean_bias is not None:
            mean_bias.copy_(bias.expand_as(mean_bias))

    # --- masks, applied on top of the family -------------------------------------------------
    @property
    def masked(self) -> bool:
        return self.to_mean is not None or self.to_zero is not None

    def effective_moments(self) -> Moments:
        mean, var = self.weight_moments()
        if self.to_mean is not None:
            var = torch.where(self.to_mean, torch.zeros_like(var), var)
        if self.to_zero is not None:
            mean = torch.where(self.to_zero, torch.zeros_like(mean), mean)
            var = torch.where(self.to_zero, torch.zeros_like(var), var)
        return mean, var

    def effective_means(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.masked:
            return self.means()
        return self.effective_moments()[0], self.means()[1]

    def effective_sample(
        self, noise: NoiseSource, zero_mean: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One (weight, bias) draw with the masks applied; ``zero_mean`` draws w - mu (N(0, var)
        for N(mu, var)) where the family has that form."""
        weight, bias = self.sample(noise)
        zero_mean = zero_mean and self.has_zero_mean_form
        if zero_mean:
            weight = weight - self.weight_moments()[0]
        if self.to_mean is not None:
            mean = self.effective_moments()[0]
            mean = torch.zeros_like(mean) if zero_mean else mean
            weight = torch.where(self.to_mean, mean, weight)
        if self.to_zero is not None:
            weight = torch.where(self.to_zero, torch.zeros_like(weight), weight)
        return weight, bias

    # --- forward ------------------------------------------------------------------------------
    @property
    def training_mode(self) -> ForwardMode:
        """The estimator this layer trains with (what TRAINING means for it): LOCAL or WEIGHTS."""
        return self._training_mode

    @training_mode.setter
    def training_mode(self, mode: ForwardMode | str) -> None:
        mode = ForwardMode(mode)
        if mode not in TRAINING_ESTIMATORS:
            raise ValueError(
                f"{type(self).__name__}: training_mode must be one of "
                f"{[m.value for m in TRAINING_ESTIMATORS]}, got {mode.value!r}"
            )
        self._training_mode = mode

    def resolve_mode(self, mode: ForwardMode | str | None) -> ForwardMode:
        """The mode of a pass: ``mode``, else the ``vbnn.mode`` one, else TRAINING in training
        mode and MEAN in eval mode; TRAINING read as this layer's ``training_mode``."""
        if mode is not None:
            mode = ForwardMode(mode)
        elif self.forced_mode is not None:
            mode = self.forced_mode
        else:
            mode = ForwardMode.TRAINING if self.training else ForwardMode.MEAN
        return self.training_mode if mode is ForwardMode.TRAINING else mode

    def resolve_noise(self, noise: NoiseSource | None) -> NoiseSource:
        """``noise`` if given, else the ``use_noise`` source, else torch's global RNG."""
        if noise is not None:
            return noise
        if self.shared_noise is not None:
            return self.shared_noise
        return TorchNoise(self.num_models)

    def forward(
        self,
        x: torch.Tensor,
        mode: ForwardMode | str | None = None,
        noise: NoiseSource | None = None,
        output_size: list[int] | tuple[int, ...] | None = None,
    ) -> torch.Tensor:
        """Output (M, N, O) / (M, N, O, *S') for a stack; (*, O) / (N, O, *S') for one model.

        Args:
            x: input; see ``Operator`` for the shapes.
            mode: ``ForwardMode`` or its value; None: see the module docstring.
            noise: the noise source; None: see the module docstring.
            output_size: transposed convolutions only, as ``nn.ConvTransposeNd``: the spatial
                size S' of the output (d ints, or the whole output shape), which picks the
                output padding of this call.

        Raises:
            ValueError: ``x`` of the wrong shape (both shapes named); an ``output_size`` given
                to a layer that is no transposed convolution or out of its reach (named).
            TypeError: ``x`` not floating, or of a dtype other than the parameters' (the layer
                and both dtypes named).
        """
        mode = self.resolve_mode(mode)
        self.operator.check(x, self.num_models if self.stacked else None)
        self.check_dtype(x)
        if output_size is None:
            return self._forward(x, mode, noise)
        if not self.operator.transposed:
            raise ValueError(
                f"{type(self).__name__}({self.extra_repr()}): output_size applies to transposed "
                f"convolutions only"
            )
        spatial = tuple(x.shape[-self.operator.rank :])
        padding = self.operator.output_padding_for(spatial, output_size)
        # this call's operator: the same transposed convolution with the padding that reaches
        # output_size; every family reads ``self.operator``, so it is swapped for the call
        operator, self.operator = self.operator, self.operator.with_output_padding(padding)
        try:
            return self._forward(x, mode, noise)
        finally:
            self.operator = operator

    def _forward(
        self, x: torch.Tensor, mode: ForwardMode, noise: NoiseSource | None
    ) -> torch.Tensor:
        """``forward`` once its arguments are checked."""
        if self.stacked:
            return self.propagate(x, mode, self.resolve_noise(noise))
        lead = x.shape[:-1]  # a single dense layer takes (*, I), as nn.Linear: rows are examples
        x = x.reshape(-1, x.shape[-1]) if self.kernel_size is None else x
        out = self.propagate(x.unsqueeze(0), mode, self.resolve_noise(noise)).squeeze(0)
        return out.reshape(*lead, out.shape[-1]) if self.kernel_size is None else out

    def check_dtype(self, x: torch.Tensor) -> None:
        """Raise a TypeError naming the layer and both dtypes unless ``x`` has the parameters'
        floating dtype (under ``torch.autocast`` any floating dtype passes: autocast casts)."""
        dtype = next((p.dtype for p in self._parameters.values() if p is not None), x.dtype)
        if x.dtype == dtype or (x.is_floating_point() and torch.is_autocast_enabled(x.device.type)):
            return
        problem = "a floating input" if x.is_floating_point() else "a floating, not integer, input"
        raise TypeError(
            f"{type(self).__name__}({self.extra_repr()}) takes {problem} of its parameters' dtype "
            f"{dtype}, got {x.dtype}: convert the input (x.to({dtype})) or the model"
        )

    def propagate(self, x: torch.Tensor, mode: ForwardMode, noise: NoiseSource) -> torch.Tensor:
        """The output for ``x`` with the model dimension, in ``mode``."""
        if mode is ForwardMode.MEAN:
            return self.operator.apply(x, *self.effective_means())
        if mode is not ForwardMode.LOCAL or not self.exact_lrt:
            zero_mean = mode is ForwardMode.ZERO_MEAN
            return self.operator.apply(x, *self.effective_sample(noise, zero_mean))
        return self.local_reparameterization(x, noise)

    def local_reparameterization(self, x: torch.Tensor, noise: NoiseSource) -> torch.Tensor:
        """One LRT draw of the pre-activations of ``x`` (with the model dimension)."""
        mean_weight, var_weight = self.effective_moments()
        mean_bias, var_bias = self.bias_moments()
        # the mean product first, the variance's second (as always: buffer addresses, hence the
        # last bits of the products, depend on the order of the allocations)
        mean = self.operator.apply(x, mean_weight, mean_bias) if self.has_weight_mean else None
        var = self.operator.apply(x * x, var_weight, var_bias)
        if mean is None and mean_bias is None:  # zero-mean weights: the mean is the bias, or 0
            mean = var.new_zeros(())
        elif mean is None:  # (M, O) against (M, N, O) or (M, N, O, *S)
            mean = mean_bias.reshape(*mean_bias.shape[:1], 1, -1, *[1] * (var.dim() - 3))
        eps = noise.randn(*var.shape[1:], dtype=x.dtype, device=x.device)
        return gaussian_from_moments(mean, var, eps, VARIANCE_FLOOR)

    # --- summaries ----------------------------------------------------------------------------
    def posterior_mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight mean (weight shape) and bias mean (M, O) (zeros when the layer has no bias)."""
        weight, bias = self.means()
        return weight, self._zeros_if_none(bias)

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Marginal std of every weight (weight shape) and bias (M, O) (0 for a point bias)."""
        mean_bias, var_bias = self.bias_moments()
        if var_bias is None:
            bias_std = torch.zeros_like(self._zeros_if_none(mean_bias))
        else:
            bias_std = var_bias.sqrt()
        return self.weight_moments()[1].sqrt(), bias_std

    def _zeros_if_none(self, bias: torch.Tensor | None) -> torch.Tensor:
        if bias is not None:
            return bias
        mean = self.means()[0]
        return torch.zeros(self.num_models, self.out_features, dtype=mean.dtype, device=mean.device)

    def extra_repr(self) -> str:
        kind = self.operator.kind
        models = f", num_models={self.num_models}" if self.stacked else ""
        kernel = f", kernel_size={self.kernel_size}" if self.kernel_size else ""
        return (
            f"{self.family_name or type(self).__name__}: {kind}, in={self.in_features}, "
            f"out={self.out_features}{kernel}, bias={self.has_bias}{models}"
        )


# the estimators a layer may train with (``VariationalLayer.training_mode``)
TRAINING_ESTIMATORS = (ForwardMode.LOCAL, ForwardMode.WEIGHTS)


def default_training_mode(operator: Operator) -> ForwardMode:
    """The estimator a layer of ``operator``'s kind trains with unless told otherwise.

    Dense layers: LOCAL (the LRT, a fresh draw per example). (Transposed) convolutions: WEIGHTS,
    one weight draw per batch: the LRT's second convolution (of x^2 with the variances) doubles
    a convolution's step, and at the small posterior stds a network starts from the gradient's
    variance comes from the minibatch, not from the weight noise, so the cheaper step reaches a
    given test NLL sooner (the time-to-quality benchmark, ``docs/families.md``).
    """
    return ForwardMode.WEIGHTS if operator.is_conv else ForwardMode.LOCAL


# log alpha is clipped to this range for numerical safety. The upper end is wide enough for the
# "essentially infinite" alphas of a converged variance layer (Neklyudov et al. 2019 section 4.3:
# alpha > 1e7, i.e.
# log alpha > 16); the lower end keeps alpha mu^2 from underflowing in float32.
LOG_ALPHA_RANGE = (-10.0, 20.0)


def clip_log_alpha(log_alpha: torch.Tensor) -> torch.Tensor:
    """log alpha clamped to ``LOG_ALPHA_RANGE`` (no gradient outside the range)."""
    return clip(log_alpha, *LOG_ALPHA_RANGE)
