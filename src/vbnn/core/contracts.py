"""Contracts of vbnn: read this module first.

Every tensor that belongs to a model carries a leading *model dimension* ``M``: a stack of
independent networks (the 20 splits of a UCI data set, seeds, hyper-parameter candidates) is
one set of tensors, trained by batched matrix products. A single network is ``M = 1``.

Shapes used throughout:
    M: number of independent models in the stack.
    N: number of examples.
    I, O: input and output width of a layer.

The pieces:
    * :class:`ForwardMode` - how a variational layer maps inputs to outputs.
    * :class:`ParameterRole` - what a layer's parameter holds, for per-role learning rates.
    * :class:`VariationalLayer` - the family contract every layer under ``vbnn.layers`` obeys.
    * :class:`Prior` - what a family needs from a prior to report its KL.
    * :class:`Method`, :class:`Activation` - the typed choices of the UCI engine.
    * :class:`TrainConfig` - frozen settings of one training run, stored with its results.
    * :class:`SplitResult`, :class:`RunResult` - frozen results.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import torch

from vbnn.core.randomness import NoiseSource


class ForwardMode(str, Enum):
    """How the variational layers of a network produce their output in one forward pass.

    LOCAL: a fresh draw per example. Families with Gaussian, factorised weights use the local
        reparameterization trick (Kingma et al. 2015): the pre-activation of every example is drawn
        from its exact Gaussian marginal. Families without it (full covariance) draw one weight
        sample per model, shared across the examples. Training uses this mode.
    WEIGHTS: one weight sample per model, shared by all examples: the pass is one function f ~ q.
    MEAN: weights replaced by their posterior means (deterministic; mean propagation, Neklyudov
        et al. 2019 eq. 3).
    ZERO_MEAN: WEIGHTS with each Gaussian N(mu, var) replaced by N(0, var) (Neklyudov et al. 2019,
        Theorem 1); families whose weights are not Gaussian (point, binary dropout) sample as in
        WEIGHTS.

    An ensemble (test-time averaging over K passes, Neklyudov et al. 2019 eq. 2) is not a mode:
    it is K passes in WEIGHTS or ZERO_MEAN mode (``vbnn.sample``).
    """

    LOCAL = "local"
    WEIGHTS = "weights"
    MEAN = "mean"
    ZERO_MEAN = "zero-mean"


class ParameterRole(str, Enum):
    """What a parameter of a family layer holds, for the optimizer (``VariationalLayer.roles``).

    Adam moves every coordinate by about its learning rate whatever its gradient, so parameters
    whose scale or gradient noise differs from the means' may need a rate of their own
    (``training.optimizer.learning_rate_groups``).

    WEIGHTS: means, point weights, biases and standard deviations (every parameter not named).
    CORRELATION: entries of a covariance factor that hold correlations between weights (FC's
        strictly lower Cholesky entries, the low-rank factor).
    LOG_ALPHA: log alpha of variational dropout (the noise-to-signal ratio of every weight).
    """

    WEIGHTS = "weights"
    CORRELATION = "correlation"
    LOG_ALPHA = "log-alpha"


class Algorithm(str, Enum):
    """How the UCI engine fits a network: the algorithm, apart from the family it fits."""

    VI = "vi"  # maximise the ELBO of a variational family
    MAP = "map"  # maximum a posteriori at point weights
    ES = "es"  # maximum likelihood at point weights, early stopped on held-out training rows
    SGLD = "sgld"  # stochastic gradient Langevin dynamics at point weights


class Method(str, Enum):
    """The methods of the overpruning paper's Table 1 (Trippe & Turner 2017), each an
    algorithm with a family, plus VI with any family of ``vbnn.layers.FAMILIES``
    (``TrainConfig.family``)."""

    ES = "es"  # maximum likelihood, early stopped on a validation part of the training data
    MAP = "map"  # maximum a posteriori under the Gaussian prior
    MF = "mf"  # mean-field Gaussian, learned variances, LRT
    GD = "gd"  # mean-field Gaussian, fixed user-set std ("Gaussian dropout"), LRT
    FC = "fc"  # full-covariance Gaussian per layer, weight samples
    SGLD = "sgld"  # stochastic gradient Langevin dynamics (Welling & Teh 2011), point weights
    VI = "vi"  # the ELBO of ``TrainConfig.family``

    @property
    def algorithm(self) -> Algorithm:
        if self in (Method.MF, Method.GD, Method.FC, Method.VI):
            return Algorithm.VI
        return Algorithm(self.value)

    @property
    def family(self) -> str | None:
        """The registry name of the family this method fixes (None for VI: any family)."""
        return {Method.MF: "mf", Method.GD: "gd", Method.FC: "fc", Method.VI: None}.get(
            self, "point"
        )


# The six methods of the overpruning paper's Table 1, in its column order ("all" on the CLI).
TABLE1_METHODS = (Method.ES, Method.MAP, Method.MF, Method.GD, Method.FC, Method.SGLD)


class Activation(str, Enum):
    TANH = "tanh"
    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    IDENTITY = "identity"


@runtime_checkable
class Prior(Protocol):
    """A prior over the weights of one layer (factorised over its entries)."""

    def kl_diagonal(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """KL(N(mean, diag std^2) || prior), summed over all but the leading model dim -> (M,)."""
        ...

    def kl_correlated(
        self, mean: torch.Tensor, trace: torch.Tensor, log_det: torch.Tensor
    ) -> torch.Tensor:
        """KL(N(mean, Sigma) || prior) -> (M,), for priors where it depends on Sigma only through
        tr(Sigma) and log det(Sigma) (isotropic Gaussians); others raise TypeError.

        mean (M, D), trace (M,), log_det (M,).
        """
        ...

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """log p(value), summed over all but the leading model dim -> (M,)."""
        ...


@runtime_checkable
class VariationalLayer(Protocol):
    """The family contract: one dense layer holding a distribution over (weight, bias).

    A layer maps ``x`` of shape (M, N, I) to (M, N, O). Weights are stored as (M, I, O) so that
    the output is ``x @ weight + bias`` with batched matrix products.
    """

    in_features: int
    out_features: int
    num_models: int

    def forward(
        self, x: torch.Tensor, mode: ForwardMode | None = None, noise: NoiseSource | None = None
    ) -> torch.Tensor:
        """Output (M, N, O); ``noise`` None draws from the ``use_noise`` source, else from torch's
        global RNG."""
        ...

    def kl(self, prior: Prior) -> torch.Tensor:
        """KL(q || prior) of this layer's weights and biases, one value per model: (M,)."""
        ...

    def posterior_mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior means: weight (M, I, O), bias (M, O)."""
        ...

    def posterior_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior marginal standard deviations: weight (M, I, O), bias (M, O)."""
        ...


SGLD_SAMPLES = 100  # samples SGLD keeps by default (the predictive averages over them)


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one run. Defaults are the overpruning paper's (appendix A of Trippe & Turner
    2017).

    Attributes:
        method: inference method (a Table 1 method, or "vi" with ``family``).
        family: the ``vbnn.layers.FAMILIES`` name that VI fits (method "vi" only; the other
            methods fix their family: ``resolved_family``).
        hidden: widths of the hidden layers.
        activation: hidden non-linearity.
        iterations: full-batch optimisation steps (None: 5000, ES 2000 as in the paper).
        learning_rate, betas: Adam settings.
        cholesky_learning_rate: FC only: Adam rate of the off-diagonal Cholesky entries (None:
            ``learning_rate``, the paper's setting; see ``training.full_batch.parameter_groups``).
        covariance_factor: FC only: the parameterization of the Cholesky factor, stored with
            the run; "scaled-unit" (L = diag(s) (I + A)) is the one implemented (see
            ``vbnn.layers.full_covariance``).
        prior_std: std s of the factorised N(0, s^2) prior (MAP, MF, GD, FC).
        posterior_std: initial posterior std (MF, FC); the fixed std of GD.
        noise_std: None learns the Gaussian noise std as a point parameter; a number fixes it
            (in standardised target units).
        noise_std_init: initial noise std when it is learned (standardised units).
        kl_weight: multiplies the KL term of the ELBO (1 is the true ELBO).
        train_samples: Monte-Carlo samples of the expected log-likelihood per step.
        test_samples: K, predictive samples in the test log-likelihood.
        validation_fraction: ES only: share of the training rows held out to pick the stop.
        eval_every: ES only: iterations between validation checks.
        burn_in: SGLD only: steps discarded before samples are kept (None: a fifth of them).
        thinning: SGLD only: keep one sample every ``thinning`` steps after the burn-in (None:
            spaced to keep ``SGLD_SAMPLES`` samples).
        step_size: SGLD only: eta in the step size eps_t = (eta / N) (1 + t / decay_steps)^-gamma.
        step_decay: SGLD only: gamma in (0.5, 1] keeps sum eps_t infinite and sum eps_t^2 finite.
        decay_steps: SGLD only: tau, the steps over which the step size starts to fall.
        batch_size: SGLD only: examples per gradient estimate (None: the full training set).
        seed: base seed; model m of split s uses streams derived from (seed, s).
        chunk_size: models trained together; None picks it from the problem size.
        dtype: "float32" or "float64".
        compile: fuse each training step with ``torch.compile`` (needs a C++ compiler). A
            step agrees with eager to float rounding, not bit for bit, and long runs can
            amplify that (see docs/uci.md). Off by default.
        device: where the stack trains ("cpu", "cuda", "cuda:1", ...). Noise is drawn on the
            CPU streams whatever the device, so a GPU run follows the CPU run's numbers to float
            rounding (not bit for bit).
    """

    method: Method = Method.MF
    family: str | None = None
    hidden: tuple[int, ...] = (50,)
    activation: Activation = Activation.TANH
    iterations: int | None = None
    learning_rate: float = 0.005
    cholesky_learning_rate: float | None = None
    covariance_factor: str = "scaled-unit"
    betas: tuple[float, float] = (0.9, 0.99)
    prior_std: float = 1.0
    posterior_std: float = 1e-4
    noise_std: float | None = None
    noise_std_init: float = 1.0
    kl_weight: float = 1.0
    train_samples: int = 1
    test_samples: int = 100
    validation_fraction: float = 0.1
    eval_every: int = 10
    burn_in: int | None = None
    thinning: int | None = None
    step_size: float = 0.05
    step_decay: float = 0.55
    decay_steps: int = 1000
    batch_size: int | None = None
    seed: int = 0
    chunk_size: int | None = None
    dtype: str = "float32"
    compile: bool = False
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.method not in {m.value for m in Method} | set(Method):
            choices = ", ".join(m.value for m in Method)
            raise ValueError(f"TrainConfig: unknown method {self.method!r}; choose from {choices}")
        object.__setattr__(self, "method", Method(self.method))
        object.__setattr__(self, "activation", Activation(self.activation))
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.covariance_factor != "scaled-unit":
            raise ValueError(
                f"TrainConfig: invalid covariance_factor={self.covariance_factor!r}; FC's factor "
                "is 'scaled-unit', L = diag(s) (I + A), the one implemented"
            )
        checks = {
            "iterations": self.iterations is None or self.iterations > 0,
            "learning_rate": self.learning_rate > 0,
            "cholesky_learning_rate": self.cholesky_learning_rate is None
            or self.cholesky_learning_rate > 0,
            "prior_std": self.prior_std > 0,
            "posterior_std": self.posterior_std > 0,
            "noise_std": self.noise_std is None or self.noise_std > 0,
            "noise_std_init": self.noise_std_init > 0,
            "kl_weight": self.kl_weight >= 0,
            "train_samples": self.train_samples >= 1,
            "test_samples": self.test_samples >= 1,
            "validation_fraction": 0 < self.validation_fraction < 1,
            "eval_every": self.eval_every >= 1,
            "burn_in": self.burn_in is None or self.burn_in >= 0,
            "thinning": self.thinning is None or self.thinning >= 1,
            "step_size": self.step_size > 0,
            "step_decay": 0.5 < self.step_decay <= 1,
            "decay_steps": self.decay_steps >= 1,
            "batch_size": self.batch_size is None or self.batch_size >= 1,
            "chunk_size": self.chunk_size is None or self.chunk_size >= 1,
            "hidden": all(h >= 1 for h in self.hidden),
            "dtype": self.dtype in ("float32", "float64"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"TrainConfig: invalid {name}={getattr(self, name)!r}")
        try:  # stored as its string, so that a config stays JSON (results, saved models)
            object.__setattr__(self, "device", str(torch.device(self.device)))
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"TrainConfig: invalid device={self.device!r} ({error})") from None
        if self.method is Method.VI and self.family is None:
            raise ValueError("TrainConfig: method 'vi' needs a family (e.g. family='vd-layer')")
        if self.method is not Method.VI and self.family not in (None, self.method.family):
            raise ValueError(
                f"TrainConfig: method {self.method.value!r} fits family {self.method.family!r}, "
                f"not {self.family!r}; use method='vi' for another family"
            )

    @property
    def resolved_family(self) -> str:
        """The registry name of the family this run fits."""
        return self.family if self.family is not None else str(self.method.family)

    @property
    def algorithm(self) -> Algorithm:
        return self.method.algorithm

    @property
    def resolved_iterations(self) -> int:
        if self.iterations is not None:
            return self.iterations
        return 2000 if self.method is Method.ES else 5000

    @property
    def resolved_burn_in(self) -> int:
        return self.resolved_iterations // 5 if self.burn_in is None else self.burn_in

    @property
    def resolved_thinning(self) -> int:
        if self.thinning is not None:
            return self.thinning
        return max(1, (self.resolved_iterations - self.resolved_burn_in) // SGLD_SAMPLES)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["method"] = self.method.value
        if self.method is not Method.VI:
            del out["family"]  # fixed by the method (and absent from the keys of stored runs)
        if self.resolved_family != "fc":
            del out["covariance_factor"]  # FC's alone (absent from other methods' stored keys)
        out["activation"] = self.activation.value
        out["iterations"] = self.resolved_iterations
        return out


@dataclass(frozen=True)
class SplitResult:
    """Metrics of one split, in the target's original units."""

    split: int
    test_log_likelihood: float
    test_rmse: float
    train_seconds: float
    stopped_iteration: int | None = None  # ES: the iteration whose weights were kept


@dataclass(frozen=True)
class RunResult:
    """All splits of one data set and method, with the configuration that produced them."""

    dataset: str
    config: TrainConfig
    splits: tuple[SplitResult, ...]
    notes: tuple[str, ...] = field(default=())


# --- Variance networks (Neklyudov et al. 2018, 2019) -------------------------------------


@runtime_checkable
class DropoutPrior(Protocol):
    """A prior whose KL to the variational-dropout posterior N(mu, alpha mu^2) is known per alpha.

    ``kl_dropout`` takes the means and log alpha (broadcastable to the means) and returns the KL
    summed over all but the leading model dim, (M,). ``kl_zero_mean`` is the KL of the zero-mean
    posterior N(0, std^2) (appendix F of Neklyudov et al. 2019), (M,).
    """

    def kl_dropout(self, mean: torch.Tensor, log_alpha: torch.Tensor) -> torch.Tensor: ...

    def kl_zero_mean(self, std: torch.Tensor) -> torch.Tensor: ...
