"""Contracts of the sweeps: what a unit of work is, what comes back, and where units run.

Every executor (``sweeps.executors``: this process, worker processes; ``sweeps.ray_executor``:
a Ray cluster) and every caller that builds units imports these from here, so the executors
depend on this module and not on each other.

The pieces:
    * :class:`Unit` - one independent piece of a sweep: a module-level function, its arguments
      and the CPUs it needs.
    * :class:`Outcome` - a finished unit: its value, or its error.
    * :class:`Executor` - runs units and yields their outcomes as they finish.
    * :class:`ExecutorKind` and :class:`ExecutorSettings` - which executor and how.
    * :func:`call_with_threads` - runs a unit on its torch thread count, on every executor.

Every executor runs a unit on the same number of torch intra-op threads, :attr:`Unit.threads`
(its ``cpus``, one when it declares none). A float sum can round differently when it is split
over another number of threads, so this is what makes a unit give the same digits here, in
worker processes and on Ray.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import torch


class ExecutorKind(str, Enum):
    LOCAL = "local"
    PROCESSES = "processes"
    RAY = "ray"


@dataclass(frozen=True)
class Unit:
    """One independent piece of a sweep.

    Attributes:
        key: names the unit in the progress bar and the failure summary.
        function: a module-level function (Ray pickles it by reference), called as
            ``function(*arguments)`` on a worker; it returns the result and writes nothing shared.
        arguments: picklable arguments.
        cpus: CPU cores the unit uses: torch runs on as many intra-op threads on every
            executor, and Ray schedules by it. None: one.
    """

    key: str
    function: Callable[..., Any]
    arguments: tuple[Any, ...] = ()
    cpus: int | None = None

    @property
    def threads(self) -> int:
        """Torch intra-op threads the unit runs on, whichever executor runs it."""
        return 1 if self.cpus is None else self.cpus


@dataclass(frozen=True)
class Outcome:
    """A finished unit: its ``value``, or ``error`` (the formatted exception) when it failed."""

    unit: Unit
    value: Any = None
    error: str | None = None


class Executor(Protocol):
    """Runs units and yields their outcomes as they finish (in any order), one per unit."""

    def run(self, units: Sequence[Unit]) -> Iterator[Outcome]: ...

    def close(self) -> None: ...


def call_with_threads(function: Callable[..., Any], threads: int, *arguments: Any) -> Any:
    """Run one unit on ``threads`` torch intra-op threads (a worker's, or here and put back)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return function(*arguments)
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class ExecutorSettings:
    """Which executor and, for Ray, where and how.

    Attributes:
        kind: local, processes or ray.
        address: Ray cluster address (e.g. ``10.0.0.5:6379`` of ``ray start --head`` on a
            cluster's head node, or ``auto`` on a machine of the cluster); None starts a private
            Ray instance on this machine.
        cpus_per_unit: CPUs (torch threads) of a unit on every executor; Ray runs ``total
            CPUs / cpus_per_unit`` at once. None: one. Float sums depend on the thread count,
            and every executor gives a unit the same count, so they agree bit for bit.
        workers: processes at once for ``processes`` (None: this machine's CPUs divided by
            ``cpus_per_unit``).
        max_retries: Ray reruns of a unit whose worker process or node died (the unit's own
            exceptions are not retried).
        num_cpus: CPUs of a private Ray instance (None: all of this machine's).
        gpus_per_unit: GPUs a Ray task declares (a fraction shares one); Ray hides the GPUs from
            a task that declares none, so units that train on CUDA need it.
        connect_timeout: seconds the Ray executor waits for ``address`` to answer before
            refusing it (``ray_executor.check_reachable``).
    """

    kind: ExecutorKind = ExecutorKind.LOCAL
    address: str | None = None
    cpus_per_unit: int | None = None
    max_retries: int = 3
    num_cpus: int | None = None
    workers: int | None = None
    gpus_per_unit: float = 0.0
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.cpus_per_unit is not None and self.cpus_per_unit < 1:
            raise ValueError(f"--cpus-per-unit must be >= 1, got {self.cpus_per_unit}")
        if self.kind is not ExecutorKind.RAY and self.address is not None:
            raise ValueError("--address needs --executor ray")
        if self.workers is not None and self.kind is not ExecutorKind.PROCESSES:
            raise ValueError("--workers needs --executor processes")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not self.gpus_per_unit >= 0:
            raise ValueError(f"--gpus-per-unit must be >= 0, got {self.gpus_per_unit}")
        if not self.connect_timeout > 0:
            raise ValueError(f"connect_timeout must be > 0, got {self.connect_timeout}")
        if self.gpus_per_unit and self.kind is not ExecutorKind.RAY:
            raise ValueError("--gpus-per-unit needs --executor ray (here every unit sees the GPUs)")

    def process_count(self) -> int:
        """Worker processes of ``processes``: ``workers``, else CPUs / ``cpus_per_unit``."""
        if self.workers is not None:
            return self.workers
        return max(1, usable_cpus() // (self.cpus_per_unit or 1))


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's or ``taskset``'s share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
