"""Data-parallel ``vbnn.train`` over the processes of ``torch.distributed``.

A script started by ``torchrun --nproc-per-node W`` that calls
``torch.distributed.init_process_group`` (gloo on CPUs, NCCL on GPUs) before ``vbnn.train`` trains
data-parallel: ``train`` finds the initialised group (``Processes.current``) and runs W copies
of one run, one per process, that stay equal. A launched script that does not initialise the
group (``WORLD_SIZE`` > 1 in its environment) has it initialised by ``train``, with a warning
(``join_launched_group``), rather than training W independent copies.

Sharding. Every process holds the whole network and data and draws the same order of the data
(the data-order generator is seeded by ``seed`` alone). ``batch_size`` is the global batch: each
batch B_s of the epoch is cut into W contiguous shards of sizes b_p differing by at most one
(``shard``, the split of ``torch.tensor_split``), and process p computes on its shard only.

Scaling. Process p computes its usual objective on its shard, the data term scaled to the N
examples of the data set,

    L_p = N / b_p sum_{n in shard p} E_q[log p(y_n | x_n, W)] - kl_weight KL(q || p),

and its gradient g_p; one all-reduce per step (``average_gradients``) replaces it by the
shard-weighted average, which is the gradient of the single-process objective of B_s:

    sum_p (b_p / |B_s|) g_p = N / |B_s| sum_{n in B_s} grad E_q[log p(y_n | x_n, W)]
                              - kl_weight grad KL(q || p),

since sum_p b_p = |B_s|: the KL is counted once, however many processes. The same holds for any
objective that is (a scale of) a per-example sum plus a term of the parameters alone: MAP's log
prior, the likelihood's noise prior, the batch mean of ``TrainerConfig.batch_mean``. With equal
shards the weights are 1 / W, the gradient average of DDP; the all-reduce is the trainer's own
rather than ``DistributedDataParallel``'s so that unequal shards (the last batch of an epoch)
weigh by their size, and so that it covers the likelihood's parameters, the KL's, and those an
objective leaves without a gradient (MAP's stds), for every optimiser (Adam, IVON). Every process
then takes the same step from the same gradient, so the parameters stay equal.

Noise. Process p's weight noise comes from its own streams (``rank_noise``): model m of process p
draws the stream of model p M + m of a stack of W M models (keyed by ``seed``), so process 0 draws
what a single-process run draws and no two processes share a stream; torch's global RNG
(``nn.Dropout``) is seeded from (``seed``, p) (``global_seed``).

Validation and checkpoints. Each process evaluates its shard of every validation chunk and the
sums are all-reduced (``Processes.all_sum``), as is the epoch's training NLL, so every process
reads the metrics of the whole validation data and early stopping ends every process at the same
epoch. A checkpoint gathers every process's streams (``RankStreams``), process 0 writes it
atomically and the others wait (``save_once``); a resumed run reads the one file in every
process, each taking back its own streams, so the file must be visible to every process (one
machine or a shared file system).
"""

from __future__ import annotations

import atexit
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

from vbnn.core.batch_rule import apply
from vbnn.core.randomness import ModelGenerators, derive_seed
from vbnn.training.batches import Batch, Batches
from vbnn.training.checkpoint import ResumableRun, Stateful, save_checkpoint
from vbnn.training.settings import Objective

# what a launcher (``torchrun``) sets beside WORLD_SIZE, read by init_process_group's env://
LAUNCH_VARIABLES = ("RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Processes:
    """Process ``rank`` of the ``world`` processes of a data-parallel run (0 of 1: one process).

    Attributes:
        rank: p, this process's index in the default process group.
        world: W, the processes of the group.
        device: where the small reductions of the run are made (NCCL reduces CUDA tensors only).
    """

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def current(cls, device: torch.device) -> Processes:
        """The default group of ``torch.distributed`` when it is initialised; in a process of a
        launch of several (``WORLD_SIZE`` > 1, as ``torchrun`` sets) without one, the group
        ``join_launched_group`` initialises; else one process."""
        initialised = dist.is_available() and dist.is_initialized()
        if not initialised and launched_world() > 1:
            join_launched_group(device)
            initialised = True
        if not initialised:
            return cls(device=device)
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def parallel(self) -> bool:
        """Whether the run is spread over more than one process."""
        return self.world > 1

    def all_sum(self, values: Sequence[float]) -> list[float]:
        """The sums over the processes of ``values`` (float64; unchanged in one process)."""
        if not self.parallel:
            return list(values)
        total = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return total.tolist()

    def broadcast(self, module: nn.Module, parameters: bool = True) -> None:
        """Give every process process 0's buffers of ``module`` (and, with ``parameters``, its
        parameters): the same start and, after an epoch, the same BatchNorm statistics."""
        if not self.parallel:
            return
        tensors = list(module.buffers()) + (list(module.parameters()) if parameters else [])
        with torch.no_grad():
            for tensor in tensors:
                dist.broadcast(tensor, 0)

    def barrier(self) -> None:
        if self.parallel:
            dist.barrier()


def launched_world() -> int:
    """W of the launch this process belongs to: ``WORLD_SIZE`` of the environment (1 unset).

    Raises:
        ValueError: ``WORLD_SIZE`` is not a positive integer.
    """
    text = os.environ.get("WORLD_SIZE", "1")
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"WORLD_SIZE={text!r} in the environment: not a number of processes")
    return int(text)


def join_launched_group(device: torch.device) -> None:
    """Initialise the default process group of a launched process (gloo; NCCL for a CUDA
    ``device``, each process on GPU ``LOCAL_RANK`` when ``device`` names no index) from the
    variables a launcher sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), with
    a warning from process 0 that it did; the group is destroyed when the process exits.

    Without it, W processes started by ``torchrun`` would train W independent copies.

    Raises:
        ValueError: a launcher's variable missing, or ``torch.distributed`` not available; the
            message says how to launch or initialise.
    """
    world = launched_world()
    missing = [name for name in LAUNCH_VARIABLES if name not in os.environ]
    if missing or not dist.is_available():
        lacking = f"{', '.join(missing)} unset" if missing else "torch.distributed unavailable"
        raise ValueError(
            f"WORLD_SIZE={world} in the environment but {lacking}, and no process group "
            f"initialised: start the script with `torchrun --nproc-per-node {world} script.py`, "
            "or call torch.distributed.init_process_group() before vbnn.train (or unset "
            "WORLD_SIZE to train in one process)"
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda" and device.index is None:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    atexit.register(_destroy_group)
    if dist.get_rank() == 0:
        warnings.warn(
            f"vbnn.train: launched with WORLD_SIZE={world} and no process group; initialised "
            f"torch.distributed ({backend}) for a data-parallel run of {world} processes (call "
            "torch.distributed.init_process_group() before vbnn.train to choose the backend)",
            stacklevel=4,
        )


def _destroy_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def check_parallel(processes: Processes, objective: Objective, **sources: Any) -> None:
    """ValueError, before any training, for what a data-parallel run cannot do with the data
    ``sources`` (name -> what ``vbnn.train`` was given: "data", "validation").

    Raises:
        ValueError: objective "sgld" (its Langevin noise must be the same in every process), a
            ``DataLoader`` that shuffles from torch's global RNG (which differs by process) or is
            sharded already (``DistributedSampler``).
    """
    if not processes.parallel:
        return
    if objective is Objective.SGLD:
        raise ValueError(
            f"objective 'sgld': not data-parallel over {processes.world} processes "
            "(the Langevin noise of a step would differ by process); train it in "
            "one process"
        )
    for name, source in sources.items():
        sampler = source.sampler if isinstance(source, DataLoader) else None
        if isinstance(sampler, DistributedSampler):
            raise ValueError(
                f"{name}: a DataLoader with a DistributedSampler; vbnn.train "
                "shards each batch itself, so pass a loader of the whole data "
                "set"
            )
        if isinstance(sampler, RandomSampler) and sampler.generator is None:
            raise ValueError(
                f"{name}: a shuffling DataLoader without a generator draws its "
                "order from torch's global RNG, which differs by process; give "
                "it one (DataLoader(..., generator=torch.Generator()"
                ".manual_seed(0)))"
            )


def rank_noise(
    seed: int, models: int, processes: Processes, device: torch.device
) -> ModelGenerators:
    """Process p's training-noise streams: model m draws the stream of model p M + m of a stack
    of W M models keyed by ``seed`` (p = 0: those of a single-process run)."""
    first = processes.rank * models
    return ModelGenerators.for_keys(seed, range(first, first + models), "train", device)


def global_seed(seed: int, processes: Processes) -> int:
    """The seed of torch's global RNG in process p (p = 0: that of a single-process run)."""
    return derive_seed(seed, processes.rank, "global")


def shard(rows: int, processes: Processes) -> slice:
    """The rows of process p in a batch of ``rows``: the p-th of W contiguous parts whose sizes
    differ by at most one, the larger first (``torch.tensor_split``)."""
    size, extra = divmod(rows, processes.world)
    start = processes.rank * size + min(processes.rank, extra)
    return slice(start, start + size + (processes.rank < extra))


class ShardedBatches:
    """The batches of a source, each cut to the shard of this process (``shard``); a stack's
    rows (x (M, B, ...)) along their second dimension.

    Attributes:
        share: b_p / |B_s| of the last batch drawn, the weight of this process's gradient.
    """

    def __init__(self, batches: Batches, processes: Processes) -> None:
        self.batches, self.processes = batches, processes
        self.count, self.stacked = batches.count, batches.stacked
        self.share = 1.0 / processes.world

    def _cut(self, batch: Batch) -> tuple[Batch, int, int]:
        x, y = batch
        axis = 1 if self.stacked else 0
        rows = y.shape[axis]
        part = shard(rows, self.processes)
        length = part.stop - part.start
        inputs = apply(x, lambda values: values.narrow(axis, part.start, length))
        return (inputs, y.narrow(axis, part.start, length)), length, rows

    def epoch(self) -> int:
        return self.batches.epoch()

    def batch(self, step: int) -> Batch:
        cut, length, rows = self._cut(self.batches.batch(step))
        if length == 0:
            raise ValueError(
                f"batch_size: batch {step} of the epoch holds {rows} examples, "
                f"fewer than the {self.processes.world} processes; choose a "
                "batch_size whose every batch, the last included, holds at least "
                "one example a process"
            )
        self.share = length / rows
        return cut

    def in_order(self) -> Iterator[Batch]:
        for batch in self.batches.in_order():
            cut, length, _ = self._cut(batch)
            if length:
                yield cut

    def target(self) -> torch.Tensor:
        return self.batches.target()

    def state_dict(self) -> dict[str, Any]:
        inner = self.batches
        return inner.state_dict() if isinstance(inner, Stateful) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(self.batches, Stateful):
            self.batches.load_state_dict(state)


def shard_batches(batches: Batches, processes: Processes) -> Batches:
    """``batches`` cut to this process's shards in a data-parallel run, else unchanged."""
    return ShardedBatches(batches, processes) if processes.parallel else batches


def average_gradients(optimizer: torch.optim.Optimizer, batches: Batches) -> None:
    """Before every ``optimizer.step()``, replace each gradient by the shard-weighted average
    sum_p (b_p / |B_s|) g_p over the processes (module docstring): one all-reduce of all the
    gradients of a dtype, flattened. Nothing for a single-process run (``batches`` not sharded).
    """
    if not isinstance(batches, ShardedBatches):
        return

    def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        groups: dict[torch.dtype, list[torch.Tensor]] = {}
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                if parameter.grad is not None:
                    groups.setdefault(parameter.grad.dtype, []).append(parameter.grad)
        for gradients in groups.values():
            flat = torch.cat([g.reshape(-1) for g in gradients]).mul_(batches.share)
            dist.all_reduce(flat)
            for gradient, average in zip(
                gradients, flat.split([g.numel() for g in gradients]), strict=True
            ):
                gradient.copy_(average.view_as(gradient))

    optimizer.register_step_pre_hook(hook)


class RankStreams:
    """The noise streams and torch's global RNG of every process, for a checkpoint: ``gather``
    (in every process) collects them, ``state_dict`` returns what was gathered, and
    ``load_state_dict`` puts this process's own back (after the checkpoint's generic restore,
    which holds process 0's)."""

    def __init__(self, noise: ModelGenerators, processes: Processes) -> None:
        self.noise, self.processes = noise, processes
        self.gathered: list[Any] = []

    def gather(self) -> None:
        own = {"noise": self.noise.get_state(), "torch_rng": torch.get_rng_state()}
        self.gathered = [None] * self.processes.world
        dist.all_gather_object(self.gathered, own)

    def state_dict(self) -> dict[str, Any]:
        return {"processes": self.gathered}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        own = state["processes"][self.processes.rank]
        self.noise.set_state(own["noise"])
        torch.set_rng_state(own["torch_rng"])


def save_once(
    file: Path, run: ResumableRun, streams: RankStreams | None, *, epoch: int, records: dict
) -> None:
    """``save_checkpoint`` of ``run``, with every process's streams gathered first, written by
    process 0 while the others wait (one process: written at once)."""
    if streams is None:
        save_checkpoint(file, run, epoch=epoch, records=records)
        return
    streams.gather()
    if streams.processes.rank == 0:
        save_checkpoint(file, run, epoch=epoch, records=records)
    streams.processes.barrier()
