"""The choices and settings of ``vbnn.train`` beyond its keyword arguments."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vbnn.core.contracts import ParameterRole
from vbnn.training.loop import StepCallback


class Objective(str, Enum):
    """What a training step maximises (``training.objectives``).

    * ELBO: ``vbnn.elbo``, N / B sum_batch E_q[log p(y | x, W)] - kl_weight KL(q || p);
    * MAP: ``vbnn.log_joint`` of the mean network, N / B sum_batch log p(y | x, W) + log p(W);
    * LIKELIHOOD: maximum likelihood of the mean network, N / B sum_batch log p(y | x, W);
    * SGLD: the log posterior of MAP, moved by the Langevin update (Welling & Teh 2011;
      ``LangevinDynamics``) with step size ``learning_rate``.
    """

    ELBO = "elbo"
    MAP = "map"
    LIKELIHOOD = "likelihood"
    SGLD = "sgld"

    @classmethod
    def parse(cls, value: Objective | str) -> Objective:
        """The objective named ``value``; a ValueError lists the choices."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(repr(o.value) for o in cls)
            raise ValueError(f"objective: unknown {value!r}; choose one of {choices}") from None


class LearningRateSchedule(str, Enum):
    """How the step size moves over the epochs e = 1 .. E of a run.

    * CONSTANT: lr at every epoch (the papers' text, Neklyudov et al. 2019 section 6);
    * LINEAR: lr (E - e + 1) / E during epoch e, from lr down to lr / E in the last epoch (the
      authors' public code, ``da-molchanov/variance-networks``: ``lr_linear``, set at the start
      of each epoch, "decayed linearly to 0").
    """

    CONSTANT = "constant"
    LINEAR = "linear"

    def factor(self, epoch: int, epochs: int) -> float:
        """Multiplier of the base step sizes during ``epoch`` (1-based) of ``epochs``."""
        if self is LearningRateSchedule.LINEAR:
            return (epochs - epoch + 1) / epochs
        return 1.0


@dataclass(frozen=True)
class TrainerConfig:
    """Settings of ``vbnn.train`` that most runs leave at their defaults.

    Attributes:
        kl_weight: multiplies the KL of the ELBO (1: the ELBO itself).
        samples: Monte-Carlo draws of the ELBO's expected log-likelihood per step.
        rates: (role, learning rate) pairs, e.g. ``(("log_alpha", 0.05),)``: the parameters of
            that ``ParameterRole`` get their own Adam step size (the others ``learning_rate``).
        schedule: how every step size changes over the epochs (``LearningRateSchedule``).
        validation_samples: K weight samples of the validation predictive.
        checkpoint_file: the file's name inside the ``checkpoint`` folder.
        description: the progress bar's label.
        restore_train_mode: leave the network in ``.train()`` mode at the end (for a caller that
            keeps training it or evaluates it in that mode), instead of ``.eval()``.
        shuffle: draw a new order of the data every epoch; False: the data's own order (with
            ``batch_size`` None, plain full-batch gradient steps).
        batch_mean: objective "likelihood" only: each step minimises the batch's mean negative
            log-likelihood -1/|B_s| sum_{n in B_s} log p(y_n | x_n, W) (the per-batch
            cross-entropy of most PyTorch code) instead of -L_s / N; the same direction, the
            step rescaled by N / |B_s| before Adam's normalisation.
        step_decay: SGLD: gamma of the polynomially decaying step size of step t = 1, 2, ...
            (counted over the whole run), eps_t = learning_rate (1 + (t - 1) / decay_steps)^-gamma
            (Welling & Teh 2011: gamma in (0.5, 1] gives sum eps_t = inf, sum eps_t^2 < inf);
            0: a constant step size.
        decay_steps: SGLD: the steps over which the step size starts to fall.
        model_learning_rates: SGLD on a stack of M models: one step size per model (M values,
            e.g. tuning candidates) in place of ``learning_rate``.
        noise_prior_std: objectives "map" and "sgld" with a ``GaussianLikelihood``: adds the
            log density of a N(0, s^2) prior on its log noise std to the log joint (None: the
            noise std has no prior).
        step_callbacks: called after every step as ``callback(step, terms)``, with the step's
            number counted over the whole run (1, 2, ...) and its detached terms
            (``training.loop``), the network still in ``.train()`` mode; e.g. SGLD keeping every
            k-th state of its chain within one long epoch. Not part of a checkpoint's settings.
    """

    kl_weight: float = 1.0
    samples: int = 1
    rates: tuple[tuple[ParameterRole | str, float | None], ...] = ()
    schedule: LearningRateSchedule = LearningRateSchedule.CONSTANT
    validation_samples: int = 16
    checkpoint_file: str = "training.pt"
    description: str = "train"
    restore_train_mode: bool = False
    shuffle: bool = True
    batch_mean: bool = False
    step_decay: float = 0.0
    decay_steps: int = 1
    model_learning_rates: tuple[float, ...] | None = None
    noise_prior_std: float | None = None
    step_callbacks: tuple[StepCallback, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", LearningRateSchedule(self.schedule))
        rates = tuple((ParameterRole(role), rate) for role, rate in self.rates)
        object.__setattr__(self, "rates", rates)
        if self.kl_weight < 0:
            raise ValueError(f"TrainerConfig: kl_weight must be >= 0, got {self.kl_weight}")
        object.__setattr__(self, "step_callbacks", tuple(self.step_callbacks))
        if self.model_learning_rates is not None:
            object.__setattr__(self, "model_learning_rates", tuple(self.model_learning_rates))
        if self.step_decay < 0 or self.decay_steps < 1:
            raise ValueError(
                f"TrainerConfig: step_decay must be >= 0 and decay_steps >= 1, got "
                f"{self.step_decay} and {self.decay_steps}"
            )
        if self.noise_prior_std is not None and self.noise_prior_std <= 0:
            raise ValueError(
                f"TrainerConfig: noise_prior_std must be > 0, got {self.noise_prior_std}"
            )
        for name in ("samples", "validation_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainerConfig: {name} must be >= 1, got {getattr(self, name)}")
