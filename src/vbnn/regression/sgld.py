"""SGLD: stochastic gradient Langevin dynamics (Welling & Teh 2011) for a stack of networks.

theta_{t+1} = theta_t + (eps_t / 2) [ grad log p(theta) + (N / n) sum_{i in batch} grad log p(y_i |
x_i, theta) ] + eta_t,   eta_t ~ N(0, eps_t I),

with the polynomially decaying step size eps_t = (step_size / N) (1 + t / decay_steps)^-gamma,
gamma in (0.5, 1] (Welling & Teh's conditions: sum eps_t = inf, sum eps_t^2 < inf). Dividing by N
makes ``step_size`` a per-example rate that transfers across data-set sizes.

theta holds the point weights of every layer and the log noise std of the Gaussian likelihood.
Priors: the weights' N(0, s^2) (``SGLDConfig.prior_std``) and N(0, 1) on the log noise std in
standardised target units (a weak prior: the noise std lies within a factor e of 1 with 68 %
probability). Samples after ``burn_in`` steps, one every ``thinning`` steps, form the predictive.
Every model of the stack draws its mini-batches and its Langevin noise from its own stream, so a
model samples the same chain alone or in a batch. The chain is one epoch of ``iterations`` steps
of ``vbnn.train`` with objective "sgld" (the Langevin update ``LangevinDynamics``, its step-size
decay ``TrainerConfig.step_decay`` and the noise-std prior ``TrainerConfig.noise_prior_std``) and
a step callback that keeps the samples.
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import ModelGenerators
from vbnn.networks.mlp import MLP
from vbnn.regression.full_batch import Problem
from vbnn.regression.runs import ModelValues, SGLDConfig
from vbnn.training.batches import StackedBatches
from vbnn.training.likelihoods import GaussianLikelihood
from vbnn.training.loop import NonFiniteLossError, StepCallback
from vbnn.training.settings import TrainerConfig
from vbnn.training.trainer import train

State = dict[str, torch.Tensor]

NOISE_LOG_STD_PRIOR_STD = 1.0


def sample(
    config: SGLDConfig,
    problem: Problem,
    noise: ModelGenerators,
    *,
    values: ModelValues | None = None,
    progress: bool = False,
    description: str = "sgld",
) -> list[State]:
    """Run the chains for ``config.iterations`` steps; return the kept samples.

    The chains train through ``vbnn.train`` (objective "sgld") as one epoch of
    ``config.iterations`` steps, each on a batch drawn with replacement per model
    (``StackedBatches``); the step size decays as ``TrainerConfig.step_decay``, and a step
    callback (``TrainerConfig.step_callbacks``) keeps the samples.

    Args:
        problem: a stack of point networks (``Point`` layers), the chains' start, its
            likelihood, and (M, N, I) and (M, N) standardised training data.
        noise: one stream per model for mini-batches and Langevin noise.
        values: per-model ``prior_std`` and ``step_size`` (eta), each (M,), overriding the
            config's.

    Returns:
        The kept states (copies of ``model`` and ``likelihood`` parameters), oldest first.

    Raises:
        NonFiniteLossError: the chain left the region of finite density (step size too large).
    """
    model, likelihood, x, y = problem.model, problem.likelihood, problem.x, problem.y
    values = values or ModelValues()
    num_examples = y.shape[1]
    kept, keep = _keeper(config, nn.ModuleDict({"model": model, "likelihood": likelihood}))
    settings = _trainer_config(config, values, num_examples, description, keep)
    batches = StackedBatches(
        x, y, config.batch_size, noise, replacement=True, steps=config.iterations
    )
    try:
        train(
            model,
            batches,
            likelihood=likelihood,
            objective="sgld",
            prior=config.prior(values),
            epochs=1,
            learning_rate=config.step_size / num_examples,
            progress=progress,
            config=settings,
            noise=noise,
        )
    except NonFiniteLossError as error:
        raise NonFiniteLossError(
            f"{error} (SGLD log posterior): the step size is too large (lower SGLDConfig.step_size)"
        ) from error
    if not kept:
        raise ValueError(
            f"SGLD kept no samples: iterations={config.iterations}, "
            f"burn_in={config.resolved_burn_in}, thinning={config.resolved_thinning}"
        )
    return kept


def _trainer_config(
    config: SGLDConfig,
    values: ModelValues,
    num_examples: int,
    description: str,
    keep: StepCallback,
) -> TrainerConfig:
    """The ``vbnn.train`` settings of the chains: the step size's polynomial decay (eta / N per
    model with ``values.step_size``), the noise std's prior, and ``keep`` after every step."""
    per_model = None if values.step_size is None else values.step_size / num_examples
    return TrainerConfig(
        step_decay=config.step_decay,
        decay_steps=config.decay_steps,
        model_learning_rates=None if per_model is None else tuple(per_model.tolist()),
        noise_prior_std=NOISE_LOG_STD_PRIOR_STD,
        description=description,
        restore_train_mode=True,
        step_callbacks=(keep,),
    )


def _keeper(config: SGLDConfig, modules: nn.Module) -> tuple[list[State], StepCallback]:
    """The kept states and the step callback appending a copy of ``modules``' state to them at
    every ``resolved_thinning``-th step after the ``resolved_burn_in`` steps."""
    kept: list[State] = []

    def keep(iteration: int, terms: dict[str, torch.Tensor]) -> None:
        past_burn_in = iteration - config.resolved_burn_in
        if past_burn_in > 0 and past_burn_in % config.resolved_thinning == 0:
            kept.append({k: v.detach().clone() for k, v in modules.state_dict().items()})

    return kept, keep


@torch.no_grad()
def predictions(
    model: MLP, likelihood: GaussianLikelihood, states: list[State], x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Network outputs (S, M, N) and noise stds (S, M) of every kept sample on x (M, N, I)."""
    modules = nn.ModuleDict({"model": model, "likelihood": likelihood})
    outputs, noise_stds = [], []
    for state in states:
        modules.load_state_dict(state)
        outputs.append(model(x, ForwardMode.MEAN).squeeze(-1))
        noise_stds.append(likelihood.std().clone())
    return torch.stack(outputs), torch.stack(noise_stds)
