"""Settings and results of one UCI-engine run: one frozen config per algorithm (the shared fields
in a base), the results of its splits (``RunResult``; one split's, ``SplitResult``, is a record of
``core.contracts``, which the stores keep without importing the configs).

A method is an algorithm with a family: ES, MAP and SGLD fit point weights; VI fits any family of
``vbnn.layers.FAMILIES``. The method names of Trippe & Turner 2017 (Table 1) are spellings of
these: ``es``, ``map``, ``sgld``, and ``mf``, ``gd``, ``fc`` for VI with that family
(``regression.methods.method_config``, :attr:`TrainConfig.method`). Any other family name
spells VI with it.

Each config answers what differs between algorithms, so that the engine, the tuner and the
trainer never ask which algorithm they hold: its prior (``prior``) and full-batch objective
(``AdamConfig.objective_terms``), its predictive (``predictive``), early stopping
(``early_stopping``), the network passes of a step (``samples_per_step``), the Adam rates of
parameter roles (``role_learning_rates``), the options of its layers (``layer_options``) and its
search space (``search_space``). A new algorithm is one config class and its line in ``CONFIGS``.

Defaults are the paper's (its appendix A). A config is stored with the results it produced
(``TrainConfig.to_dict``), and hashed into their key (``stores.results_db.config_hash``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

import torch
from torch import nn

from vbnn.core.contracts import Activation, ParameterRole, SplitResult
from vbnn.core.defaults import EARLY_STOPPING_ITERATIONS, INIT_STD, PRIOR_STD, UCI_ITERATIONS
from vbnn.core.randomness import NoiseSource
from vbnn.layers.registry import family as family_spec
from vbnn.priors.gaussian import GaussianPrior
from vbnn.training.likelihoods import Likelihood
from vbnn.training.objectives import elbo, log_joint, log_likelihood


class Algorithm(str, Enum):
    """How a network is fitted, apart from the family it fits."""

    ES = "es"  # maximum likelihood at point weights, early stopped on held-out training rows
    MAP = "map"  # maximum a posteriori at point weights
    SGLD = "sgld"  # stochastic gradient Langevin dynamics at point weights
    VI = "vi"  # maximise the ELBO of a variational family


# The six methods of Table 1 of Trippe & Turner 2017, in its column order ("all" on the CLI).
TABLE1_METHODS = ("es", "map", "mf", "gd", "fc", "sgld")
SGLD_SAMPLES = 100  # samples SGLD keeps by default (the predictive averages over them)
DEFAULT_LEARNING_RATE = 0.005
DEFAULT_BETAS = (0.9, 0.99)
# Searched range of a prior std (MAP, VI, SGLD), log scale.
PRIOR_STD_RANGE = (0.01, 10.0)

# A search space: hyper-parameter name -> (low, high), searched on a log scale.
SearchSpace = dict[str, tuple[float, float]]


class PredictiveKind(str, Enum):
    """What the test predictive averages over."""

    POINT = "point"  # N(f(x; w), sigma^2) at the trained point weights
    DRAWS = "draws"  # (1/K) sum_k N(f(x; w_k), sigma^2), w_k drawn from the variational family
    CHAIN = "chain"  # the same mixture over the samples a Markov chain kept


@dataclass(frozen=True)
class Predictive:
    """How a trained stack predicts.

    Attributes:
        kind: what the mixture averages over.
        samples: K, the draws of ``DRAWS`` (1 otherwise; a chain keeps its own count).
    """

    kind: PredictiveKind
    samples: int = 1

    @property
    def stochastic(self) -> bool:
        """Whether the test predictive draws from the variational family."""
        return self.kind is PredictiveKind.DRAWS


@dataclass(frozen=True)
class EarlyStopping:
    """Early stopping on held-out training rows.

    Attributes:
        validation_fraction: share of each split's training rows held out.
        eval_every: iterations between validation checks (the last iteration is checked too).
    """

    validation_fraction: float
    eval_every: int


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The settings every algorithm shares; build one of its subclasses (or
    ``regression.methods.method_config``).

    Attributes:
        hidden: widths of the hidden layers.
        activation: hidden non-linearity.
        iterations: optimisation (SGLD: sampling) steps.
        noise_std: None learns the Gaussian noise std as a point parameter; a number fixes it
            (in standardised target units).
        noise_std_init: initial noise std when it is learned (standardised units).
        seed: base seed; model m of split s uses streams derived from (seed, s).
        chunk_size: models trained together; None picks it from the problem size.
        dtype: "float32" or "float64".
        device: where the stack trains ("cpu", "cuda", "cuda:1", ...). Noise is drawn on the
            CPU streams whatever the device, so a GPU run follows the CPU run's numbers to float
            rounding (not bit for bit).
    """

    algorithm: ClassVar[Algorithm]

    hidden: tuple[int, ...] = (50,)
    activation: Activation = Activation.TANH
    iterations: int = UCI_ITERATIONS
    noise_std: float | None = None
    noise_std_init: float = 1.0
    seed: int = 0
    chunk_size: int | None = None
    dtype: str = "float32"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if type(self) is TrainConfig:
            raise TypeError(
                "TrainConfig holds the shared fields: build ESConfig, MAPConfig, SGLDConfig or "
                "VIConfig (or vbnn.regression.method_config('mf', ...))"
            )
        object.__setattr__(self, "activation", Activation(self.activation))
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        for name, ok in self._checks().items():
            if not ok:
                raise ValueError(f"{type(self).__name__}: invalid {name}={getattr(self, name)!r}")
        try:  # stored as its string, so that a config stays JSON (results, saved models)
            object.__setattr__(self, "device", str(torch.device(self.device)))
        except (RuntimeError, TypeError) as error:
            raise ValueError(
                f"{type(self).__name__}: invalid device={self.device!r} ({error})"
            ) from None

    def _checks(self) -> dict[str, bool]:
        """Field name -> whether its value is valid; subclasses add theirs."""
        return {
            "hidden": all(h >= 1 for h in self.hidden),
            "iterations": self.iterations >= 1,
            "noise_std": self.noise_std is None or self.noise_std > 0,
            "noise_std_init": self.noise_std_init > 0,
            "chunk_size": self.chunk_size is None or self.chunk_size >= 1,
            "dtype": self.dtype in ("float32", "float64"),
        }

    @property
    def network_family(self) -> str:
        """The registry name of the family the network's layers have."""
        return "point"

    @property
    def method(self) -> str:
        """The method's name in tables, stored runs and the CLI: the algorithm's, or for VI the
        family's (``mf``, ``gd``, ``fc``, ``vd-layer``, ...)."""
        return self.algorithm.value

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def predictive(self) -> Predictive:
        """How the trained stack predicts: at its point weights unless the algorithm says
        otherwise."""
        return Predictive(PredictiveKind.POINT)

    @property
    def samples_per_step(self) -> int:
        """Network passes of one training step per model (the activations a model holds)."""
        return 1

    def prior(self, values: ModelValues) -> GaussianPrior | None:
        """The prior over the weights, with ``values``' per-model stds; None: no prior."""
        return None

    def early_stopping(self) -> EarlyStopping | None:
        """How training stops early on held-out rows; None: it runs every iteration."""
        return None

    def role_learning_rates(self) -> dict[ParameterRole, float | None]:
        """Adam rates of parameter roles apart from ``learning_rate`` (None: shares it)."""
        return {}

    def layer_options(self, values: ModelValues) -> dict[str, Any]:
        """Keyword options for the family's layers beyond the architecture's (``values``
        gives per-model ones)."""
        return {}

    def search_space(self) -> SearchSpace:
        """What a hyper-parameter search varies: name -> (low, high) on a log scale."""
        raise NotImplementedError(f"{type(self).__name__} declares no search space")

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain JSON, the algorithm included (``config_from_dict`` inverts)."""
        out = {"algorithm": self.algorithm.value, **dataclasses.asdict(self)}
        out["activation"] = self.activation.value
        return out


@dataclass(frozen=True, kw_only=True)
class AdamConfig(TrainConfig):
    """Settings of the algorithms that optimise with full-batch Adam (ES, MAP, VI).

    Attributes:
        learning_rate, betas: Adam settings.
        compile: fuse each training step with ``torch.compile`` (needs a C++ compiler). A
            step agrees with eager to float rounding, not bit for bit, and long runs can
            amplify that (see docs/uci.md). Off by default.
    """

    learning_rate: float = DEFAULT_LEARNING_RATE
    betas: tuple[float, float] = DEFAULT_BETAS
    compile: bool = False

    def _checks(self) -> dict[str, bool]:
        return {**super()._checks(), "learning_rate": self.learning_rate > 0}

    # Parameters: the stack's network and likelihood, the prior ``prior(values)`` gave, the
    # (M, N, I) inputs and (M, N) targets, and the noise of stochastic forward passes.
    def objective_terms(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: GaussianPrior | None,
        x: torch.Tensor,
        y: torch.Tensor,
        noise: NoiseSource,
    ) -> dict[str, torch.Tensor]:
        """The terms of the objective that full-batch Adam maximises, each (M,), with the total
        under ``"objective"``: here the log-likelihood sum_n log p(y_n | x_n, w)."""
        return log_likelihood(model, likelihood, x, y)


@dataclass(frozen=True, kw_only=True)
class ESConfig(AdamConfig):
    """Maximum likelihood, early stopped on a validation part of the training data.

    Attributes:
        validation_fraction: share of the training rows held out to pick the stop.
        eval_every: iterations between validation checks.
    """

    algorithm: ClassVar[Algorithm] = Algorithm.ES

    iterations: int = EARLY_STOPPING_ITERATIONS
    validation_fraction: float = 0.1
    eval_every: int = 10

    def _checks(self) -> dict[str, bool]:
        return {
            **super()._checks(),
            "validation_fraction": 0 < self.validation_fraction < 1,
            "eval_every": self.eval_every >= 1,
        }

    def early_stopping(self) -> EarlyStopping:
        return EarlyStopping(self.validation_fraction, self.eval_every)

    def search_space(self) -> SearchSpace:
        return {"learning_rate": (1e-4, 0.1)}


@dataclass(frozen=True, kw_only=True)
class MAPConfig(AdamConfig):
    """Maximum a posteriori under the factorised N(0, prior_std^2) prior."""

    algorithm: ClassVar[Algorithm] = Algorithm.MAP

    prior_std: float = PRIOR_STD

    def _checks(self) -> dict[str, bool]:
        return {**super()._checks(), "prior_std": self.prior_std > 0}

    def prior(self, values: ModelValues) -> GaussianPrior:
        return GaussianPrior(values.get(self, "prior_std"))

    def objective_terms(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: GaussianPrior | None,
        x: torch.Tensor,
        y: torch.Tensor,
        noise: NoiseSource,
    ) -> dict[str, torch.Tensor]:
        """The log joint log p(y | x, w) + log p(w) (``training.objectives.log_joint``)."""
        return log_joint(model, likelihood, prior, x, y)

    def search_space(self) -> SearchSpace:
        return {"prior_std": PRIOR_STD_RANGE}


@dataclass(frozen=True, kw_only=True)
class SGLDConfig(TrainConfig):
    """Stochastic gradient Langevin dynamics (Welling & Teh 2011) at point weights.

    Attributes:
        prior_std: std of the factorised N(0, prior_std^2) prior.
        step_size: eta in the step size eps_t = (eta / N) (1 + t / decay_steps)^-gamma.
        step_decay: gamma in (0.5, 1] keeps sum eps_t infinite and sum eps_t^2 finite.
        decay_steps: tau, the steps over which the step size starts to fall.
        batch_size: examples per gradient estimate (None: the full training set).
        burn_in: steps discarded before samples are kept (None: a fifth of them).
        thinning: keep one sample every ``thinning`` steps after the burn-in (None: spaced to
            keep ``SGLD_SAMPLES`` samples).
    """

    algorithm: ClassVar[Algorithm] = Algorithm.SGLD

    prior_std: float = PRIOR_STD
    step_size: float = 0.05
    step_decay: float = 0.55
    decay_steps: int = 1000
    batch_size: int | None = None
    burn_in: int | None = None
    thinning: int | None = None

    def _checks(self) -> dict[str, bool]:
        return {
            **super()._checks(),
            "prior_std": self.prior_std > 0,
            "step_size": self.step_size > 0,
            "step_decay": 0.5 < self.step_decay <= 1,
            "decay_steps": self.decay_steps >= 1,
            "batch_size": self.batch_size is None or self.batch_size >= 1,
            "burn_in": self.burn_in is None or self.burn_in >= 0,
            "thinning": self.thinning is None or self.thinning >= 1,
        }

    @property
    def predictive(self) -> Predictive:
        return Predictive(PredictiveKind.CHAIN)

    def prior(self, values: ModelValues) -> GaussianPrior:
        return GaussianPrior(values.get(self, "prior_std"))

    def search_space(self) -> SearchSpace:
        # eta of eps_t = (eta / N)(1 + t / tau)^-gamma; the paper gives no SGLD settings at all
        return {"prior_std": PRIOR_STD_RANGE, "step_size": (1e-3, 1.0)}

    @property
    def resolved_burn_in(self) -> int:
        return self.iterations // 5 if self.burn_in is None else self.burn_in

    @property
    def resolved_thinning(self) -> int:
        if self.thinning is not None:
            return self.thinning
        return max(1, (self.iterations - self.resolved_burn_in) // SGLD_SAMPLES)


@dataclass(frozen=True, kw_only=True)
class VIConfig(AdamConfig):
    """Variational inference: maximise the ELBO of a family of ``vbnn.layers.FAMILIES``.

    Attributes:
        family: the registry name of the family (``mf``, ``gd``, ``fc``, ``vd-layer``, ...).
        prior_std: std of the factorised N(0, prior_std^2) prior.
        posterior_std: the marginal posterior std of every weight at the start of training
            (the layers' ``init_std``); ``gd``, which does not learn it, keeps it throughout
            (its layers' ``std``). Families without such a std (point, vd-layer, vd-neuron,
            vd-weight, dropout) take only the default (another is an error when the stack is built).
        correlation_learning_rate: Adam rate of the parameters that hold correlations between
            weights (FC's off-diagonal Cholesky entries, the low-rank factor; None: the
            ``learning_rate``, the paper's setting; see ``regression.full_batch.parameter_groups``).
        kl_weight: multiplies the KL term of the ELBO (1 is the true ELBO).
        train_samples: Monte-Carlo samples of the expected log-likelihood per step.
        test_samples: K, predictive samples in the test log-likelihood.
    """

    algorithm: ClassVar[Algorithm] = Algorithm.VI

    family: str = "mf"
    prior_std: float = PRIOR_STD
    posterior_std: float = INIT_STD
    correlation_learning_rate: float | None = None
    kl_weight: float = 1.0
    train_samples: int = 1
    test_samples: int = 100

    def _checks(self) -> dict[str, bool]:
        return {
            **super()._checks(),
            "prior_std": self.prior_std > 0,
            "posterior_std": self.posterior_std > 0,
            "correlation_learning_rate": self.correlation_learning_rate is None
            or self.correlation_learning_rate > 0,
            "kl_weight": self.kl_weight >= 0,
            "train_samples": self.train_samples >= 1,
            "test_samples": self.test_samples >= 1,
        }

    @property
    def network_family(self) -> str:
        return self.family

    @property
    def method(self) -> str:
        return self.family

    @property
    def predictive(self) -> Predictive:
        return Predictive(PredictiveKind.DRAWS, self.test_samples)

    @property
    def samples_per_step(self) -> int:
        return self.train_samples

    def prior(self, values: ModelValues) -> GaussianPrior:
        return GaussianPrior(values.get(self, "prior_std"))

    def objective_terms(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: GaussianPrior | None,
        x: torch.Tensor,
        y: torch.Tensor,
        noise: NoiseSource,
    ) -> dict[str, torch.Tensor]:
        """The ELBO E_q[log p(y | x, w)] - kl_weight KL(q || p), its expectation estimated
        from ``train_samples`` draws (``training.objectives.elbo``)."""
        return elbo(model, likelihood, prior, x, y, noise, self.kl_weight, self.train_samples)

    def role_learning_rates(self) -> dict[ParameterRole, float | None]:
        return {ParameterRole.CORRELATION: self.correlation_learning_rate}

    def layer_options(self, values: ModelValues) -> dict[str, Any]:
        """The posterior std (per model from ``values``) under the family's name for it
        (``FamilySpec.std_option``: ``init_std``, or ``std`` for ``gd``).

        Raises:
            ValueError: ``posterior_std`` differs from its default for a family whose layers
                have no posterior std (``point``, the variational dropout families, ...).
        """
        spec = family_spec(self.family)
        option = spec.std_option()
        if option in spec.accepted_options():
            return {option: values.get(self, "posterior_std")}
        if self.posterior_std != VIConfig.posterior_std:
            raise ValueError(
                f"{self.family}: its layers have no posterior std to set, got posterior_std="
                f"{self.posterior_std}; leave it at its default"
            )
        return {}

    def search_space(self) -> SearchSpace:
        """The prior std, and what the family adds (``FamilySpec.search_space``: GD's fixed
        posterior std)."""
        return {"prior_std": PRIOR_STD_RANGE, **family_spec(self.family).search_space}


@dataclass(frozen=True)
class ModelValues:
    """Settings that differ from model to model inside one stack (tuning candidates, splits
    tuned apart): each a (M,) tensor that overrides the config's field of the same name, or
    None to use the config's value for every model. The other settings are shared by a stack
    (one Adam cannot vary them per model)."""

    prior_std: torch.Tensor | None = None
    posterior_std: torch.Tensor | None = None
    step_size: torch.Tensor | None = None

    def get(self, config: TrainConfig, name: str) -> Any:
        """The (M,) override of ``name``, or the config's value."""
        value = getattr(self, name)
        return getattr(config, name) if value is None else value

    def to(self, device: torch.device | str) -> ModelValues:
        moved = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return ModelValues(**{k: None if v is None else v.to(device) for k, v in moved.items()})


# The settings that ``ModelValues`` may give per model.
PER_MODEL_SETTINGS = tuple(f.name for f in dataclasses.fields(ModelValues))


CONFIGS: dict[Algorithm, type[TrainConfig]] = {
    Algorithm.ES: ESConfig,
    Algorithm.MAP: MAPConfig,
    Algorithm.SGLD: SGLDConfig,
    Algorithm.VI: VIConfig,
}


def config_from_dict(values: dict[str, Any]) -> TrainConfig:
    """Inverse of ``TrainConfig.to_dict``: the config a stored dict describes (lists back to
    tuples)."""
    values = dict(values)
    try:
        cls = CONFIGS[Algorithm(values.pop("algorithm"))]
    except (KeyError, ValueError):
        raise ValueError(f"stored config {values}: no valid 'algorithm'") from None
    for name in ("hidden", "betas"):
        if name in values:
            values[name] = tuple(values[name])
    return cls(**values)


@dataclass(frozen=True)
class RunResult:
    """All splits of one data set and method, with the configuration that produced them."""

    dataset: str
    config: TrainConfig
    splits: tuple[SplitResult, ...]
    notes: tuple[str, ...] = field(default=())
