"""``vbnn.train``: the one epoch loop, for any network and any form of data.

Each epoch draws the order of the data (``training.batches``), then runs ``vbnn.train_loop``
over its batches: step s maximises the objective of batch B_s (``Objective``; for the ELBO,
Blundell et al. 2015 eq. 8 with Neklyudov et al. 2019 eq. 5's scaling),

    L_s = N / |B_s| sum_{n in B_s} E_q[log p(y_n | x_n, W)] - kl_weight * KL(q || p),

by one Adam step on -L_s / N (SGLD: one Langevin step on -L_s, the log posterior, with
``LangevinDynamics``). After the epoch the network is evaluated in ``.eval()`` mode on the
validation data (``training.validation``), the callbacks run, and with ``checkpoint`` the whole
state of the run is written atomically (``training.checkpoint``). This bookkeeping runs once an
epoch; what must see every step (SGLD's kept samples) is a step callback
(``TrainerConfig.step_callbacks``), so a sampler runs as one epoch of many steps.

Randomness is explicit: the data order comes from a ``torch.Generator`` seeded by ``seed``, the
variational layers' noise from one ``ModelGenerators`` stream per model (keyed by ``seed``,
passed to every forward pass through ``vbnn.use_noise``), and torch's global RNG, which modules
such as ``nn.Dropout`` draw from, is forked and seeded from ``seed`` for the run (and restored
after it). The same call therefore gives the same numbers whatever the global RNG's state, and a
run killed after epoch e and started again with the same call resumes from its checkpoint and
ends with exactly the numbers of a run that was never stopped.

Inside an initialised ``torch.distributed`` process group (a script started by ``torchrun``; a
launched script that initialises none has it initialised here, gloo on CPUs, NCCL on GPUs) the
run is data-parallel (``training.distributed``): each process computes on its shard of every
global batch of ``batch_size`` examples, with its own noise streams, and one all-reduce of the
shard-weighted gradients a step makes every process take the single-process step of the global
batch (the KL counted once); validation, early stopping and checkpoints are agreed by all.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from vbnn.core.batch_rule import batch_rule, examples
from vbnn.core.contracts import Prior
from vbnn.core.defaults import BATCH_SIZE, EPOCHS, LEARNING_RATE
from vbnn.core.devices import usable_device
from vbnn.core.gaussian import gaussian_log_prob
from vbnn.core.randomness import ModelGenerators
from vbnn.core.runtime import keep_freed_memory
from vbnn.layers.modes import as_input, stack_size, variational_layers
from vbnn.training import distributed
from vbnn.training.batches import Batches, as_batches
from vbnn.training.checkpoint import ResumableRun, load_checkpoint
from vbnn.training.likelihoods import (
    REAL_TARGETS,
    CategoricalLikelihood,
    GaussianLikelihood,
    Likelihood,
)
from vbnn.training.loop import LangevinDynamics, StepCallback, Terms, train_loop
from vbnn.training.objectives import elbo, kl, log_joint, log_likelihood
from vbnn.training.optimizer import OptimizerSettings, optimizer_settings
from vbnn.training.settings import Objective, TrainerConfig
from vbnn.training.validation import evaluate, shaped_targets

EpochCallback = Callable[[int, nn.Module, dict], None]
DEFAULT_CONFIG = TrainerConfig()


@dataclass(frozen=True)
class TrainingResult:
    """What ``train`` returns.

    Attributes:
        network: the trained module (the object passed in), on the run's device, in ``.eval()``.
        likelihood: the trained likelihood (e.g. a Gaussian's noise std).
        history: one dict per epoch: "epoch", "train_nll" (mean per example over the epoch's
            steps), "kl" (at the end of the epoch), "seconds" (of its steps) and, with
            validation data, "validation_nll" and "validation_accuracy" or "validation_rmse".
            A stack's values are averaged over its models.
        seconds: wall time of the training steps of all epochs.
        epochs: the epochs run (fewer than asked when early stopping ended the run).
        best_epoch: the epoch whose weights the network holds (early stopping), else the last.
    """

    network: nn.Module
    likelihood: nn.Module
    history: list[dict[str, float]]
    seconds: float
    epochs: int
    best_epoch: int


def _default_likelihood(target: torch.Tensor, models: int | None) -> nn.Module:
    if target.is_floating_point():
        return GaussianLikelihood(num_models=models)
    return CategoricalLikelihood()


def _check_targets(likelihood: Likelihood, target: torch.Tensor, name: str) -> None:
    """ValueError when the targets are of the wrong kind for ``likelihood``."""
    kind = type(likelihood).__name__
    if isinstance(likelihood, REAL_TARGETS) and not target.is_floating_point():
        raise ValueError(f"{name}: y is {target.dtype} but {kind} needs real targets; for class "
                         "labels use CategoricalLikelihood")  # fmt: skip
    if isinstance(likelihood, CategoricalLikelihood) and target.is_floating_point():
        fractional = target != target.floor()
        if bool(fractional.any()):
            raise ValueError(f"{name}: y holds {target[fractional][0].item()}, not a class index; "
                             f"{kind} needs integer labels (for real targets use "
                             "GaussianLikelihood)")  # fmt: skip


def _check_network(network: nn.Module, objective: Objective, likelihood: nn.Module) -> None:
    if objective is not Objective.LIKELIHOOD and not variational_layers(network):
        raise ValueError(
            f"objective {objective.value!r}: {type(network).__name__} holds no vbnn family layer "
            "(convert it with vbnn.convert, or train it by objective='likelihood')"
        )
    trained = any(p.requires_grad for p in likelihood.parameters())
    if objective is Objective.SGLD and stack_size(network) is None and trained:
        raise ValueError("objective 'sgld': the likelihood's parameters have no model "
                         "dimension; fix them (GaussianLikelihood(fixed_std=...))")  # fmt: skip


# Parameters: the contract agreed for ``vbnn.train``; rarer settings sit in ``config``
def train(
    network: nn.Module,
    data: Any,
    *,
    likelihood: nn.Module | None = None,
    objective: Objective | str = "elbo",
    prior: Prior | None = None,
    epochs: int = EPOCHS,
    batch_size: int | None = BATCH_SIZE,
    learning_rate: float = LEARNING_RATE,
    validation: Any = None,
    patience: int | None = None,
    device: str | torch.device | None = None,
    checkpoint: str | Path | None = None,
    seed: int = 0,
    progress: bool = True,
    callbacks: Iterable[EpochCallback] = (),
    config: TrainerConfig = DEFAULT_CONFIG,
    noise: ModelGenerators | None = None,
    optimizer: str | OptimizerSettings = "adam",
) -> TrainingResult:
    """Train ``network`` on ``data`` (module docstring).

    Args:
        network: any module: converted (``vbnn.convert``), a package network, a stack of M models
            (its family layers carry a model dimension; one batch is shared by every model unless
            ``data`` is a ``StackedBatches``), or a plain module (objective "likelihood").
        data: (x, y) tensors or arrays, a ``Dataset`` of (x, y) pairs, a ``DataLoader``, or a
            ``training.batches`` source; or, for one network, mappings of tensors holding the
            target (a HuggingFace batch: ``core.batch_rule``, the model's ``vbnn.BatchRule``).
        likelihood: None: ``CategoricalLikelihood`` for integer targets, else
            ``GaussianLikelihood`` (its noise std learned); a network with two outputs
            (mean, log std) takes ``HeteroscedasticGaussianLikelihood``.
        objective: "elbo", "map", "likelihood" or "sgld" (``Objective``).
        prior: None: each layer's default prior (as ``vbnn.kl``).
        batch_size: examples per step (data-parallel: the global batch, shared out between the
            processes); None: full batch (one step of all N examples).
        learning_rate: Adam's step size (SGLD: the Langevin step size).
        validation: held-out data in any form of ``data``; metrics after each epoch.
        patience: stop after this many epochs without a lower validation NLL and restore the
            best epoch's weights (needs ``validation``).
        device: where to train (None: where the network's parameters are).
        checkpoint: a folder; the run's state is written there after every epoch, and a run
            finding it resumes after the epoch it holds.
        seed: seeds the data order, the training noise and the global RNG of the run (of each
            process: ``training.distributed``).
        callbacks: called after every epoch as ``callback(epoch, network, metrics)`` with the
            network in ``.eval()`` mode.
        config: rarer settings (``TrainerConfig``: kl_weight, learning-rate schedule and per-role
            rates, Monte-Carlo samples, ...).
        noise: the training-noise streams, one per model (None: keyed by ``seed``, and by the
            process in a data-parallel run).
        optimizer: a name of ``training.optimizer.OPTIMIZERS`` or its settings: "adam" (on the
            objective), or "ivon" / ``IVON(...)``: natural-gradient mean-field VI of the 'mf'
            layers (objective "elbo"; the prior enters as IVON's weight decay, a tempered
            posterior through ``IVON.ess``, not ``kl_weight``); "sgd" / ``SGD(...)``: SGD with
            momentum on the objective (SWAG's iterates, ``training.swag``).

    Raises:
        ValueError: before any training: empty data, x and y of different lengths, targets of
            the wrong kind for the likelihood, an unknown objective, ``epochs`` < 1, a network
            without family layers for an objective that needs them, ``patience`` without
            validation data, a checkpoint of other settings, or an optimizer that holds the
            prior (IVON) with another objective than "elbo" or a ``kl_weight`` other than 1;
            data-parallel: objective "sgld", a DataLoader shuffling from torch's global RNG or
            sharded already, a batch with fewer examples than processes; a ``device`` this
            process cannot use ("cuda" without CUDA); launched by ``torchrun`` (``WORLD_SIZE``
            > 1) with neither a process group nor the launcher's variables to initialise one.
        TypeError: ``optimizer`` neither a name nor a vbnn optimiser setting (e.g.
            ``torch.optim.SGD``).
        NonFiniteLossError: the objective became NaN or inf (names the epoch and the step).
    """
    objective = Objective.parse(objective)
    settings_of_optimizer = optimizer_settings(optimizer)
    _check_optimizer(settings_of_optimizer, objective, config)
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if patience is not None and (patience < 1 or validation is None):
        raise ValueError(f"patience={patience} needs validation data and must be >= 1")
    parameter = next(network.parameters(), None)
    if device is not None:
        device = usable_device(device)
    else:
        device = parameter.device if parameter is not None else torch.device("cpu")
    processes = distributed.Processes.current(device)  # before .to: NCCL picks the GPU
    network.to(device)
    models = stack_size(network)
    distributed.check_parallel(processes, objective, data=data, validation=validation)
    progress = progress and processes.rank == 0
    rule = batch_rule(network)
    batches = as_batches(data, batch_size, torch.Generator().manual_seed(seed), device,
                         shuffle=config.shuffle, rule=rule)  # fmt: skip
    batches = distributed.shard_batches(batches, processes)
    checked = (
        None if validation is None else distributed.shard_batches(
            as_batches(validation, batch_size, torch.Generator(), device, "validation",
                       rule=rule), processes)
    )  # fmt: skip
    if likelihood is None:
        likelihood = _default_likelihood(batches.target(), models)
    likelihood.to(device)
    _check_targets(likelihood, batches.target(), "data")
    if checked is not None:
        _check_targets(likelihood, checked.target(), "validation")
    _check_network(network, objective, likelihood)
    if config.noise_prior_std is not None and (
        objective not in (Objective.MAP, Objective.SGLD)
        or not isinstance(likelihood, GaussianLikelihood)
    ):
        raise ValueError("TrainerConfig.noise_prior_std needs objective 'map' or 'sgld' and a "
                         f"GaussianLikelihood, not {objective.value!r} and "
                         f"{type(likelihood).__name__}")  # fmt: skip
    if config.batch_mean and objective is not Objective.LIKELIHOOD:
        raise ValueError(f"TrainerConfig.batch_mean needs objective 'likelihood', not "
                         f"{objective.value!r}")  # fmt: skip
    noise = noise or distributed.rank_noise(seed, models or 1, processes, device)
    keep_freed_memory()  # a step's MB-sized activations reuse freed heap memory
    count = batches.count
    modules = nn.ModuleDict({"network": network, "likelihood": likelihood})
    processes.broadcast(modules)
    factor = [1.0]
    if objective is Objective.SGLD:
        optimizer: torch.optim.Optimizer = LangevinDynamics(
            [p for p in network.parameters() if p.requires_grad]
            + [p for p in likelihood.parameters() if p.requires_grad],
            _langevin_step_size(config, learning_rate, factor, models, parameter, device),
            noise,
        )
    else:
        optimizer = settings_of_optimizer.build(
            network, likelihood, learning_rate=learning_rate, rates=dict(config.rates),
            prior=prior, dataset_size=count,
        )  # fmt: skip
    distributed.average_gradients(optimizer, batches)
    base_rates = [group.get("lr", learning_rate) for group in optimizer.param_groups]
    # an optimiser that holds the prior is given the expected log-likelihood alone
    stepped = replace(config, kl_weight=0.0) if settings_of_optimizer.includes_prior else config
    step = _step_objective(network, likelihood, prior, objective, batches, noise, stepped, models)
    # the loss of a step is -scale * objective: -L_s / N (SGLD: -L_s; batch_mean: the batch's)
    per_example = objective is not Objective.SGLD and not config.batch_mean
    scale = 1.0 / count if per_example else 1.0
    callbacks = list(callbacks)
    settings = {
        "objective": objective.value, "epochs": epochs, "batch_size": batch_size,
        "learning_rate": learning_rate, "seed": seed, "patience": patience,
        "prior": type(prior).__name__, "likelihood": type(likelihood).__name__,
        "config": _recorded(config), "examples": count, "models": models or 1,
        "optimizer": {"name": type(settings_of_optimizer).__name__,
                      **asdict(settings_of_optimizer)},
    }  # fmt: skip
    streams = distributed.RankStreams(noise, processes) if processes.parallel else None
    if streams is not None:
        settings["processes"] = processes.world
    run = ResumableRun(settings, dict(modules.items()), optimizer, noise,
                       [batches, *callbacks, *([streams] if streams else [])])  # fmt: skip
    file = None if checkpoint is None else Path(checkpoint) / config.checkpoint_file
    sampled = objective in (Objective.ELBO, Objective.SGLD) and variational_layers(network)
    samples = config.validation_samples if sampled else 1
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(distributed.global_seed(seed, processes))
        restored = None if file is None else load_checkpoint(file, run)
        done, records = restored if restored is not None else (0, _fresh_records())
        bar = tqdm(total=epochs, initial=done, desc=config.description, disable=not progress,
                   leave=False)  # fmt: skip
        try:
            for epoch in range(done + 1, epochs + 1):
                if records["stopped"]:
                    break
                factor[0] = config.schedule.factor(epoch, epochs)
                for group, rate in zip(optimizer.param_groups, base_rates, strict=True):
                    group["lr"] = rate * factor[0]
                row = _epoch(epoch, step, optimizer, batches, scale, modules, prior, count,
                             [_run_steps(records, config.step_callbacks)], progress)  # fmt: skip
                row["train_nll"] = processes.all_sum([row["train_nll"]])[0]
                processes.broadcast(modules, parameters=False)
                if checked is not None:
                    row.update(evaluate(network, likelihood, checked, samples, seed, device,
                                        processes.all_sum))  # fmt: skip
                    _early_stopping(records, row, modules, patience)
                records["history"].append(row)
                for callback in callbacks:
                    callback(epoch, network, row)
                if file is not None:
                    distributed.save_once(file, run, streams, epoch=epoch, records=records)
                bar.update(1)
                bar.set_postfix({k: f"{v:.4g}" for k, v in row.items() if k != "epoch"})
        finally:
            bar.close()
    if records["best_state"] is not None:
        modules.load_state_dict(records["best_state"])
    history = records["history"]
    network.train(config.restore_train_mode)
    likelihood.eval()
    best = records["best_epoch"] or history[-1]["epoch"]
    return TrainingResult(network, likelihood, history, sum(r["seconds"] for r in history),
                          len(history), best)  # fmt: skip


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
        raise ValueError(f"optimizer {name}: TrainerConfig.kl_weight={config.kl_weight}; the "
                         f"prior is its weight decay: temper by {name}(ess=...) (ess < N "
                         "widens the posterior)")  # fmt: skip


def _langevin_step_size(
    config: TrainerConfig,
    learning_rate: float,
    factor: list[float],
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
            raise ValueError(f"TrainerConfig.model_learning_rates: {given} values for a stack "
                             f"of {models or 1} models")  # fmt: skip
        dtype = parameter.dtype if parameter is not None else torch.get_default_dtype()
        rates = torch.tensor(config.model_learning_rates, dtype=dtype, device=device)

    def step_size(iteration: int) -> float | torch.Tensor:
        decay = (1.0 + (iteration - 1) / config.decay_steps) ** (-config.step_decay)
        return rates * factor[0] * decay

    return step_size


def _fresh_records() -> dict[str, Any]:
    return {"history": [], "best_epoch": 0, "best_nll": float("inf"), "best_state": None,
            "stopped": False, "steps": 0}  # fmt: skip


def _recorded(config: TrainerConfig) -> dict[str, Any]:
    """The settings of ``config`` a checkpoint records: all but the step callbacks."""
    settings = asdict(replace(config, step_callbacks=()))
    del settings["step_callbacks"]
    return settings


def _run_steps(records: dict[str, Any], callbacks: tuple[StepCallback, ...]) -> StepCallback:
    """Counts the run's steps in ``records`` (checkpointed with it) and calls ``callbacks``
    with that count."""

    def after_step(step: int, terms: Terms) -> None:
        records["steps"] += 1
        for callback in callbacks:
            callback(records["steps"], terms)

    return after_step


def _early_stopping(records: dict, row: dict, modules: nn.Module, patience: int | None) -> None:
    """Keep the weights of the epoch with the lowest validation NLL; stop after ``patience``
    epochs without a lower one."""
    if patience is None:
        return
    if row["validation_nll"] < records["best_nll"]:
        records["best_nll"], records["best_epoch"] = row["validation_nll"], row["epoch"]
        records["best_state"] = copy.deepcopy(
            {k: v.detach().cpu() for k, v in modules.state_dict().items()}
        )
    records["stopped"] = row["epoch"] - records["best_epoch"] >= patience


# Parameters: what one step draws and computes (module docstring)
def _step_objective(
    network: nn.Module,
    likelihood: nn.Module,
    prior: Prior | None,
    objective: Objective,
    batches: Batches,
    noise: ModelGenerators,
    config: TrainerConfig,
    models: int | None,
) -> Callable[[int], dict[str, torch.Tensor]]:
    """The ``train_loop`` objective of one epoch's step s: the terms of batch s (module
    docstring), every data term scaled to the N examples of the data set."""
    count = batches.count

    def terms(step: int) -> dict[str, torch.Tensor]:
        x, y = batches.batch(step)
        inputs = x if batches.stacked else as_input(models, x)
        target = shaped_targets(likelihood, y, models, batches.stacked)
        size = examples(target, models is not None)
        if objective is Objective.ELBO:
            out = elbo(network, likelihood, prior, inputs, target, noise, config.kl_weight,
                       config.samples, dataset_size=count)  # fmt: skip
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


# Parameters: the epoch's number and step, then what the epoch's summary reads
def _epoch(
    epoch: int,
    step: Callable[[int], dict[str, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    batches: Batches,
    scale: float,
    modules: nn.ModuleDict,
    prior: Prior | None,
    count: int,
    step_callbacks: list[StepCallback],
    progress: bool,
) -> dict[str, float]:
    """One epoch of steps in ``.train()`` mode (``step_callbacks`` after each step, a progress
    bar of its steps with ``progress``); its row of the history."""
    network = modules["network"]
    modules.train()
    data_sum: list[torch.Tensor] = []

    def keep(iteration: int, terms: dict[str, torch.Tensor]) -> None:
        # the data term is N / B_s sum_{n in B_s} log p(y_n | ...): times B_s / N, the batch's sum
        data_sum.append(terms["log-likelihood"].mean() * terms["examples"] / count)

    start = time.perf_counter()
    steps = batches.epoch()
    train_loop(step, optimizer, steps, scale, [keep, *step_callbacks],
               describe=lambda s, terms: f"(epoch {epoch}, step {s})", progress=progress,
               description=f"epoch {epoch}")  # fmt: skip
    seconds = time.perf_counter() - start
    modules.eval()
    total = float(torch.stack(data_sum).sum())
    with torch.no_grad():
        divergence = float(kl(network, prior).mean()) if variational_layers(network) else 0.0
    return {"epoch": epoch, "train_nll": -total / count, "kl": divergence, "seconds": seconds}
