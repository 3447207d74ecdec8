"""The prepared state of a ``vbnn.train`` run: its arguments checked and turned into the objects
its epoch loop reads.

``prepare`` places the network (device, data-parallel processes), builds the data sources, the
likelihood, the training-noise streams, the optimiser and the step objective, and what a
checkpoint records; the result is a frozen ``Run``, so the loop in ``training.trainer`` reads top
to bottom. Every check of ``train``'s arguments happens here, before any training.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vbnn.core.batch_rule import batch_rule, examples
from vbnn.core.contracts import Prior
from vbnn.core.devices import usable_device
from vbnn.core.gaussian import gaussian_log_prob
from vbnn.core.randomness import ModelGenerators
from vbnn.core.runtime import keep_freed_memory
from vbnn.layers.modes import as_input, stack_size, variational_layers
from vbnn.training import distributed
from vbnn.training.batches import Batches, as_batches
from vbnn.training.checkpoint import ResumableRun
from vbnn.training.likelihoods import (
    REAL_TARGETS,
    CategoricalLikelihood,
    GaussianLikelihood,
    Likelihood,
)
from vbnn.training.loop import LangevinDynamics
from vbnn.training.objectives import elbo, log_joint, log_likelihood
from vbnn.training.optimizer import OptimizerSettings, optimizer_settings
from vbnn.training.settings import LearningRateSchedule, Objective, TrainerConfig
from vbnn.training.validation import shaped_targets

# Called after every epoch as callback(epoch, network, metrics).
EpochCallback = Callable[[int, nn.Module, dict], None]
StepObjective = Callable[[int], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class Arguments:
    """``vbnn.train``'s arguments as given (its docstring)."""

    network: nn.Module
    data: Any
    likelihood: nn.Module | None
    objective: Objective | str
    prior: Prior | None
    epochs: int
    batch_size: int | None
    learning_rate: float
    validation: Any
    patience: int | None
    device: str | torch.device | None
    checkpoint: str | Path | None
    seed: int
    progress: bool
    callbacks: Iterable[EpochCallback]
    config: TrainerConfig
    noise: ModelGenerators | None
    optimizer: str | OptimizerSettings


class ScheduleFactor:
    """The learning-rate schedule's multiplier of the running epoch (``LearningRateSchedule``):
    set on the optimiser's groups when an epoch starts, read by SGLD's step size at every step."""

    def __init__(self, schedule: LearningRateSchedule, epochs: int) -> None:
        self.schedule, self.epochs, self.value = schedule, epochs, 1.0

    def start(
        self, epoch: int, optimizer: torch.optim.Optimizer, base_rates: tuple[float, ...]
    ) -> None:
        """Epoch ``epoch``'s factor; every group's rate is its base rate times it."""
        self.value = self.schedule.factor(epoch, self.epochs)
        for group, rate in zip(optimizer.param_groups, base_rates, strict=True):
            group["lr"] = rate * self.value


@dataclass(frozen=True)
class Run:
    """What the epoch loop of one ``vbnn.train`` run reads, fixed before its first epoch (the
    modules and the optimiser it holds change as they train).

    Attributes:
        modules: {"network", "likelihood"}, the two trained modules.
        batches, validation: the data sources (validation: None without held-out data).
        count: N, the training examples.
        optimizer, base_rates, factor: the optimiser, its groups' rates before the schedule, and
            the schedule's factor of the running epoch.
        step, scale: the objective of a step and its loss scale (-L_s / N; SGLD and batch means:
            1).
        samples: K, the weight samples of the validation predictive.
        resumable, streams, file: what a checkpoint holds, every process's streams
            (data-parallel; else None), and the checkpoint file (None: no checkpoints).
    """

    network: nn.Module
    likelihood: nn.Module
    modules: nn.ModuleDict
    prior: Prior | None
    config: TrainerConfig
    patience: int | None
    seed: int
    progress: bool
    callbacks: tuple[EpochCallback, ...]
    device: torch.device
    processes: distributed.Processes
    batches: Batches
    validation: Batches | None
    count: int
    optimizer: torch.optim.Optimizer
    base_rates: tuple[float, ...]
    factor: ScheduleFactor
    step: StepObjective
    scale: float
    samples: int
    resumable: ResumableRun
    streams: distributed.RankStreams | None
    file: Path | None


def prepare(arguments: Arguments) -> Run:
    """Check ``arguments`` and build the run (module docstring); raises as ``vbnn.train``
    documents, before any training."""
    objective = Objective.parse(arguments.objective)
    a = replace(arguments, objective=objective, callbacks=tuple(arguments.callbacks))
    config = a.config
    chosen = _checked_optimizer(a)
    device = _device(a.device, a.network)
    processes = distributed.Processes.current(device)  # before .to: NCCL picks the GPU
    network = a.network.to(device)
    models = stack_size(network)
    distributed.check_parallel(processes, objective, data=a.data, validation=a.validation)
    batches, checked = _sources(a, device, processes)
    likelihood = _checked_likelihood(a, batches, checked, models, device)
    noise = a.noise or distributed.rank_noise(a.seed, models or 1, processes, device)
    keep_freed_memory()  # a step's MB-sized activations reuse freed heap memory
    count = batches.count
    modules = nn.ModuleDict({"network": network, "likelihood": likelihood})
    processes.broadcast(modules)
    factor = ScheduleFactor(config.schedule, a.epochs)
    optimizer = _optimizer(a, chosen, modules, noise, factor, device, count)
    distributed.average_gradients(optimizer, batches)
    # an optimiser that holds the prior is given the expected log-likelihood alone
    stepped = replace(config, kl_weight=0.0) if chosen.includes_prior else config
    step = step_objective(network, likelihood, a.prior, objective, batches, noise, stepped, models)
    settings = _settings(a, chosen, likelihood, count, models)
    streams = distributed.RankStreams(noise, processes) if processes.parallel else None
    if streams is not None:
        settings["processes"] = processes.world
    stateful = [batches, *a.callbacks, *([streams] if streams else [])]
    sampled = objective in (Objective.ELBO, Objective.SGLD) and variational_layers(network)
    per_example = objective is not Objective.SGLD and not config.batch_mean
    return Run(
        network=network,
        likelihood=likelihood,
        modules=modules,
        prior=a.prior,
        config=config,
        patience=a.patience,
        seed=a.seed,
        progress=a.progress and processes.rank == 0,
        callbacks=a.callbacks,
        device=device,
        processes=processes,
        batches=batches,
        validation=checked,
        count=count,
        optimizer=optimizer,
        base_rates=tuple(group.get("lr", a.learning_rate) for group in optimizer.param_groups),
        factor=factor,
        step=step,
        scale=1.0 / count if per_example else 1.0,
        samples=config.validation_samples if sampled else 1,
        resumable=ResumableRun(settings, dict(modules.items()), optimizer, noise, stateful),
        streams=streams,
        file=None if a.checkpoint is None else Path(a.checkpoint) / config.checkpoint_file,
    )


def _device(device: str | torch.device | None, network: nn.Module) -> torch.device:
    """The device asked for, checked usable; None: where the network's parameters are."""
    if device is not None:
        return usable_device(device)
    parameter = next(network.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _optimizer(
    arguments: Arguments,
    chosen: OptimizerSettings,
    modules: nn.ModuleDict,
    noise: ModelGenerators,
    factor: ScheduleFactor,
    device: torch.device,
    count: int,
) -> torch.optim.Optimizer:
    """SGLD's Langevin dynamics over the trained parameters, or the chosen optimiser."""
    a, config = arguments, arguments.config
    network, likelihood = modules["network"], modules["likelihood"]
    if a.objective is not Objective.SGLD:
        return chosen.build(
            network,
            likelihood,
            learning_rate=a.learning_rate,
            rates=dict(config.rates),
            prior=a.prior,
            dataset_size=count,
        )
    parameter = next(network.parameters(), None)
    models = stack_size(network)
    return LangevinDynamics(
        [p for p in network.parameters() if p.requires_grad]
        + [p for p in likelihood.parameters() if p.requires_grad],
        langevin_step_size(config, a.learning_rate, factor, models, parameter, device),
        noise,
    )


def _checked_optimizer(arguments: Arguments) -> OptimizerSettings:
    """The optimiser's settings, after the checks that need no data (``vbnn.train``'s
    Raises)."""
    chosen = optimizer_settings(arguments.optimizer)
    _check_optimizer(chosen, arguments.objective, arguments.config)
    if arguments.epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {arguments.epochs}")
    patience = arguments.patience
    if patience is not None and (patience < 1 or arguments.validation is None):
        raise ValueError(f"patience={patience} needs validation data and must be >= 1")
    return chosen


def _sources(
    arguments: Arguments, device: torch.device, processes: distributed.Processes
) -> tuple[Batches, Batches | None]:
    """The training data source (its order drawn from ``seed``) and the validation one, each
    this process's shard."""
    a, rule = arguments, batch_rule(arguments.network)
    order = torch.Generator().manual_seed(a.seed)
    batches = as_batches(a.data, a.batch_size, order, device, shuffle=a.config.shuffle, rule=rule)
    batches = distributed.shard_batches(batches, processes)
    if a.validation is None:
        return batches, None
    validation = as_batches(
        a.validation, a.batch_size, torch.Generator(), device, "validation", rule=rule
    )
    return batches, distributed.shard_batches(validation, processes)


def _checked_likelihood(
    arguments: Arguments,
    batches: Batches,
    validation: Batches | None,
    models: int | None,
    device: torch.device,
) -> nn.Module:
    """The likelihood (the default one for the targets when none is given) on ``device``, after
    the checks of the targets, the network and the settings that depend on it."""
    a, config, objective = arguments, arguments.config, arguments.objective
    likelihood = a.likelihood
    if likelihood is None:
        likelihood = _default_likelihood(batches.target(), models)
    likelihood.to(device)
    _check_targets(likelihood, batches.target(), "data")
    if validation is not None:
        _check_targets(likelihood, validation.target(), "validation")
    _check_network(a.network, objective, likelihood)
    if config.noise_prior_std is not None and (
        objective not in (Objective.MAP, Objective.SGLD)
        or not isinstance(likelihood, GaussianLikelihood)
    ):
        raise ValueError(
            "TrainerConfig.noise_prior_std needs objective 'map' or 'sgld' and a "
            f"GaussianLikelihood, not {objective.value!r} and "
            f"{type(likelihood).__name__}"
        )
    if config.batch_mean and objective is not Objective.LIKELIHOOD:
        raise ValueError(
            f"TrainerConfig.batch_mean needs objective 'likelihood', not {objective.value!r}"
        )
    return likelihood


def _settings(
    arguments: Arguments,
    chosen: OptimizerSettings,
    likelihood: nn.Module,
    count: int,
    models: int | None,
) -> dict[str, Any]:
    """The run's settings as its checkpoint records them (a file of other settings is
    refused)."""
    a = arguments
    return {
        "objective": a.objective.value,
        "epochs": a.epochs,
        "batch_size": a.batch_size,
        "learning_rate": a.learning_rate,
        "seed": a.seed,
        "patience": a.patience,
        "prior": type(a.prior).__name__,
        "likelihood": type(likelihood).__name__,
        "config": _recorded(a.config),
        "examples": count,
        "models": models or 1,
        "optimizer": {"name": type(chosen).__name__, **asdict(chosen)},
    }


def _default_likelihood(target: torch.Tensor, models: int | None) -> nn.Module:
    if target.is_floating_point():
        return GaussianLikelihood(num_models=models)
    return CategoricalLikelihood()


def _check_targets(likelihood: Likelihood, target: torch.Tensor, name: str) -> None:
    """ValueError when the targets are of the wrong kind for ``likelihood``."""
    kind = type(likelihood).__name__
    if isinstance(likelihood, REAL_TARGETS) and not target.is_floating_point():
        raise ValueError(
            f"{name}: y is {target.dtype} but {kind} needs real targets; for class "
            "labels use CategoricalLikelihood"
        )
    if isinstance(likelihood, CategoricalLikelihood) and target.is_floating_point():
        fractional = target != target.floor()
        if bool(fractional.any()):
            raise ValueError(
                f"{name}: y holds {target[fractional][0].item()}, not a class index; "
                f"{kind} needs integer labels (for real targets use "
                "GaussianLikelihood)"
            )


def _check_network(network: nn.Module, objective: Objective, likelihood: nn.Module) -> None:
    if objective is not Objective.LIKELIHOOD and not variational_layers(network):
        raise ValueError(
            f"objective {objective.value!r}: {type(network).__name__} holds no vbnn family layer "
            "(convert it with vbnn.convert, or train it by objective='likelihood')"
        )
    trained = any(p.requires_grad for p in likelihood.parameters())
    if objective is Objective.SGLD and stack_size(network) is None and trained:
        raise ValueError(
            "objective 'sgld': the likelihood's parameters have no model "
            "dimension; fix them (GaussianLikelihood(fixed_std=...))"
        )


def _check_optimizer(
    settings: OptimizerSettings, objective: Objective, config: TrainerConfig
) -> None:
    """ValueError when an optimiser that holds the prior is given an objective it cannot run."""
    if not settings.includes_prior:
        return
    name = type(settings).__name__
    if objective is not Objective.ELBO:
        raise ValueError(f"optimizer {name}: trains objective 'elbo', not {objective.value!r}")
    if config.kl_weight != 1.0:
        raise ValueError(
            f"optimizer {name}: TrainerConfig.kl_weight={config.kl_weight}; the "
            f"prior is its weight decay: temper by {name}(ess=...) (ess < N "
            "widens the posterior)"
        )


def langevin_step_size(
    config: TrainerConfig,
    learning_rate: float,
    factor: ScheduleFactor,
    models: int | None,
    parameter: torch.Tensor | None,
    device: torch.device,
) -> Callable[[int], float | torch.Tensor]:
    """SGLD's eps_t at step t of the run: the learning rate (per model with
    ``model_learning_rates``) times the epoch's schedule factor and the polynomial decay
    (``TrainerConfig.step_decay``)."""
    rates: float | torch.Tensor = learning_rate
    if config.model_learning_rates is not None:
        given = len(config.model_learning_rates)
        if given != (models or 1):
            raise ValueError(
                f"TrainerConfig.model_learning_rates: {given} values for a stack "
                f"of {models or 1} models"
            )
        dtype = parameter.dtype if parameter is not None else torch.get_default_dtype()
        rates = torch.tensor(config.model_learning_rates, dtype=dtype, device=device)

    def step_size(iteration: int) -> float | torch.Tensor:
        decay = (1.0 + (iteration - 1) / config.decay_steps) ** (-config.step_decay)
        return rates * factor.value * decay

    return step_size


def _recorded(config: TrainerConfig) -> dict[str, Any]:
    """The settings of ``config`` a checkpoint records: all but the step callbacks."""
    settings = asdict(replace(config, step_callbacks=()))
    del settings["step_callbacks"]
    return settings


def step_objective(
    network: nn.Module,
    likelihood: nn.Module,
    prior: Prior | None,
    objective: Objective,
    batches: Batches,
    noise: ModelGenerators,
    config: TrainerConfig,
    models: int | None,
) -> Callable[[int], dict[str, torch.Tensor]]:
    """The ``train_loop`` objective of one epoch's step s: the terms of batch s (``trainer``'s
    module docstring), every data term scaled to the N examples of the data set."""
    count = batches.count

    def terms(step: int) -> dict[str, torch.Tensor]:
        x, y = batches.batch(step)
        inputs = x if batches.stacked else as_input(models, x)
        target = shaped_targets(likelihood, y, models, batches.stacked)
        size = examples(target, models is not None)
        if objective is Objective.ELBO:
            out = elbo(
                network,
                likelihood,
                prior,
                inputs,
                target,
                noise,
                config.kl_weight,
                config.samples,
                dataset_size=count,
            )
        elif objective is Objective.LIKELIHOOD:
            data = log_likelihood(network, likelihood, inputs, target)["objective"]
            scaled = data * (count / size)
            mean = data / size if config.batch_mean else scaled
            out = {"objective": mean, "log-likelihood": scaled}
        else:
            out = log_joint(network, likelihood, prior, inputs, target, dataset_size=count)
            if config.noise_prior_std is not None:
                noise_prior = gaussian_log_prob(likelihood.log_std, 0.0, config.noise_prior_std)
                out["objective"] = out["objective"] + noise_prior
        out["examples"] = torch.tensor(float(size))
        return out

    return terms
