"""``vbnn.train``: the one epoch loop, for any network and any form of data.

Each epoch draws the order of the data (``training.batches``), then runs ``vbnn.train_loop``
over its batches: step s maximises the objective of batch B_s (``Objective``; for the ELBO,
Blundell et al. 2015 eq. 8 with Neklyudov et al. 2019 eq. 5's scaling),

    L_s = N / |B_s| sum_{n in B_s} E_q[log p(y_n | x_n, W)] - kl_weight * KL(q || p),

by one Adam step on -L_s / N (SGLD: one Langevin step on -L_s, the log posterior, with
``LangevinDynamics``). After the epoch the network is evaluated in ``.eval()`` mode on the
validation data (``training.validation``) and early stopping updated
(``training.early_stopping``), the callbacks run, and with ``checkpoint`` the whole state of the
run is written atomically (``training.checkpoint``); each of these is one callback after the
epoch, in that order, and the run's objects are prepared before the first
(``training.preparation``). This bookkeeping runs once an epoch; what must see every step
(SGLD's kept samples) is a step callback (``TrainerConfig.step_callbacks``), so a sampler runs
as one epoch of many steps.

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

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from vbnn.core.contracts import Prior
from vbnn.core.defaults import BATCH_SIZE, EPOCHS, LEARNING_RATE
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import variational_layers
from vbnn.training import distributed
from vbnn.training.checkpoint import load_checkpoint
from vbnn.training.early_stopping import EarlyStopping
from vbnn.training.loop import StepCallback, Terms, train_loop
from vbnn.training.objectives import kl
from vbnn.training.optimizer import OptimizerSettings
from vbnn.training.preparation import Arguments, EpochCallback, Run, prepare
from vbnn.training.settings import Objective, TrainerConfig
from vbnn.training.validation import evaluate

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

    The keyword arguments are the documented contract of the package's one training entry
    point, each an independent choice a user makes by name (the rarer ones sit in ``config``),
    so the signature keeps them all; ``training.preparation.prepare`` checks them and builds the
    frozen ``Run`` that the epoch loop below reads.

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
    run = prepare(Arguments(**locals()))  # every argument, by name
    devices = [run.device] if run.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(distributed.global_seed(seed, run.processes))
        done, records = _resume(run)
        bar = tqdm(
            total=epochs,
            initial=done,
            desc=config.description,
            disable=not run.progress,
            leave=False,
        )
        after_epoch = _after_epoch(run, records, bar)
        try:
            for epoch in range(done + 1, epochs + 1):
                if records.stopping.stopped:
                    break
                row = _epoch(run, epoch, records)
                records.history.append(row)
                for callback in after_epoch:
                    callback(epoch, run.network, row)
        finally:
            bar.close()
    records.stopping.restore(run.modules)
    run.network.train(config.restore_train_mode)
    run.likelihood.eval()
    history = records.history
    best = records.stopping.best_epoch or history[-1]["epoch"]
    seconds = sum(r["seconds"] for r in history)
    return TrainingResult(run.network, run.likelihood, history, seconds, len(history), best)


@dataclass
class _Records:
    """What a run has recorded so far, saved in its checkpoint: the history's rows, the steps
    taken, and early stopping's record."""

    stopping: EarlyStopping
    history: list[dict[str, float]] = field(default_factory=list)
    steps: int = 0

    def count_step(self, callbacks: tuple[StepCallback, ...]) -> StepCallback:
        """A step callback counting the run's steps and calling ``callbacks`` with that count."""

        def after_step(step: int, terms: Terms) -> None:
            self.steps += 1
            for callback in callbacks:
                callback(self.steps, terms)

        return after_step

    def as_checkpoint(self) -> dict[str, Any]:
        """The records as the checkpoint's plain values."""
        return {"history": self.history, **self.stopping.as_checkpoint(), "steps": self.steps}


def _resume(run: Run) -> tuple[int, _Records]:
    """The epochs done and the records of the run's checkpoint (none: 0 and empty records)."""
    restored = None if run.file is None else load_checkpoint(run.file, run.resumable)
    if restored is None:
        return 0, _Records(EarlyStopping(run.patience))
    done, saved = restored
    stopping = EarlyStopping.from_checkpoint(run.patience, saved)
    return done, _Records(stopping, saved["history"], saved["steps"])


def _epoch(run: Run, epoch: int, records: _Records) -> dict[str, float]:
    """One epoch of steps in ``.train()`` mode at the schedule's rates (the config's step
    callbacks after each step, a progress bar of its steps with ``progress``); its row of the
    history, summed over the processes."""
    run.factor.start(epoch, run.optimizer, run.base_rates)
    run.modules.train()
    data_sum: list[torch.Tensor] = []

    def keep(iteration: int, terms: dict[str, torch.Tensor]) -> None:
        # the data term is N / B_s sum_{n in B_s} log p(y_n | ...): times B_s / N, the batch's sum
        data_sum.append(terms["log-likelihood"].mean() * terms["examples"] / run.count)

    start = time.perf_counter()
    train_loop(
        run.step,
        run.optimizer,
        run.batches.epoch(),
        run.scale,
        [keep, records.count_step(run.config.step_callbacks)],
        describe=lambda s, terms: f"(epoch {epoch}, step {s})",
        progress=run.progress,
        description=f"epoch {epoch}",
    )
    seconds = time.perf_counter() - start
    run.modules.eval()
    total = float(torch.stack(data_sum).sum())
    with torch.no_grad():
        divergence = (
            float(kl(run.network, run.prior).mean()) if variational_layers(run.network) else 0.0
        )
    row = {"epoch": epoch, "train_nll": -total / run.count, "kl": divergence, "seconds": seconds}
    row["train_nll"] = run.processes.all_sum([row["train_nll"]])[0]
    run.processes.broadcast(run.modules, parameters=False)
    return row


def _after_epoch(run: Run, records: _Records, bar: tqdm) -> list[EpochCallback]:
    """What runs after every epoch, in this order, each as ``callback(epoch, network, row)``:
    the validation metrics added to the row and early stopping (with validation data), the
    user's callbacks, the checkpoint (with a checkpoint folder), and the progress bar."""

    def validate(epoch: int, network: nn.Module, row: dict[str, float]) -> None:
        metrics = evaluate(
            network,
            run.likelihood,
            run.validation,
            run.samples,
            run.seed,
            run.device,
            run.processes.all_sum,
        )
        row.update(metrics)
        records.stopping.update(epoch, row["validation_nll"], run.modules)

    def save(epoch: int, network: nn.Module, row: dict[str, float]) -> None:
        state = records.as_checkpoint()
        distributed.save_once(run.file, run.resumable, run.streams, epoch=epoch, records=state)

    def show(epoch: int, network: nn.Module, row: dict[str, float]) -> None:
        bar.update(1)
        bar.set_postfix({k: f"{v:.4g}" for k, v in row.items() if k != "epoch"})

    validation = [] if run.validation is None else [validate]
    saving = [] if run.file is None else [save]
    return [*validation, *run.callbacks, *saving, show]
