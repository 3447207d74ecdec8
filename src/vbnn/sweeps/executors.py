"""Executors: run independent units of work here or on a Ray cluster; the driver writes results.

A sweep is a list of :class:`Unit` (a module-level function, its arguments and the CPUs it needs).
An executor runs them and yields one :class:`Outcome` per unit as it finishes; :func:`drive`
shows one progress bar (units done / total, time left), hands every result to the driver's
``on_result`` (the only writer of the results database or unit store) and ends with a summary of
the units that failed.

- :class:`LocalExecutor`: this process, one unit after another, in order.
- :class:`ProcessExecutor`: ``workers`` processes of this machine, spawned (not forked: torch
  and JAX are multithreaded once imported); no Ray needed.
- ``RayExecutor`` (``vbnn.sweeps.ray_executor``, loaded by :func:`make_executor` only when asked
  for, so Ray stays an optional dependency): every unit a Ray task with ``num_cpus`` declared and
  ``max_retries``, so a unit whose worker process or node dies is rerun and stored once.

The contracts they share (:class:`Unit`, :class:`Outcome`, :class:`Executor`,
:class:`ExecutorSettings`, :func:`call_with_threads`: every unit on its own torch thread count,
here, in worker processes and on Ray) are in ``sweeps.contracts``.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from vbnn.sweeps.contracts import (
    Executor,
    ExecutorKind,
    ExecutorSettings,
    Outcome,
    Unit,
    call_with_threads,
)

RAY_INSTALL = "pip install 'vbnn[ray]'"


class LocalExecutor:
    """This process, one unit after another in the given order (the default of most commands).

    Args:
        raise_errors: a unit that raises ends the run with its own exception (the units before
            it are handed to the driver); False: it is reported in the summary and the others
            go on, as on the other executors.
    """

    def __init__(self, raise_errors: bool = False) -> None:
        self.raise_errors = raise_errors

    def run(self, units: Sequence[Unit]) -> Iterator[Outcome]:
        for unit in units:
            try:
                value = call_with_threads(unit.function, unit.threads, *unit.arguments)
            except Exception:  # reported in the summary; the sweep goes on
                if self.raise_errors:
                    raise
                yield Outcome(unit, error=traceback.format_exc(limit=-3).strip())
            else:
                yield Outcome(unit, value)

    def close(self) -> None:
        pass


class ProcessExecutor:
    """``workers`` spawned processes of this machine; outcomes come back as units finish.

    A unit that raises is reported with its traceback and the others go on. A worker process
    that dies (killed, out of memory) breaks the pool: its unit and those still queued are
    reported as failed, and re-running the command runs only what is not stored.
    """

    def __init__(self, workers: int) -> None:
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))

    def run(self, units: Sequence[Unit]) -> Iterator[Outcome]:
        submit = self.pool.submit
        futures = {
            submit(call_with_threads, unit.function, unit.threads, *unit.arguments): unit
            for unit in units
        }
        for future in as_completed(futures):
            try:
                yield Outcome(futures[future], future.result())
            except Exception:  # the unit's own error, or its worker's death
                yield Outcome(futures[future], error=traceback.format_exc(limit=-3).strip())

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


def make_executor(settings: ExecutorSettings) -> Executor:
    """The executor ``settings`` asks for; Ray's module is imported only here, only for Ray.

    Raises:
        ValueError: Ray was asked for but is not installed (says how to install it).
    """
    if settings.kind is ExecutorKind.LOCAL:
        return LocalExecutor()
    if settings.kind is ExecutorKind.PROCESSES:
        return ProcessExecutor(settings.process_count())
    try:
        module = importlib.import_module("vbnn.sweeps.ray_executor")
    except ModuleNotFoundError as error:
        if error.name != "ray":
            raise
        raise ValueError(f"--executor ray needs Ray: {RAY_INSTALL}") from None
    return module.RayExecutor(settings)


def add_executor_arguments(
    parser: argparse.ArgumentParser, default: ExecutorKind = ExecutorKind.LOCAL
) -> None:
    """``--executor``, ``--workers``, ``--address``, ``--cpus-per-unit``, ``--gpus-per-unit``
    (``settings_from`` reads them).

    Args:
        default: the executor without ``--executor``; a command whose units are independent
            and many passes ``PROCESSES`` to use every core (each executor gives a unit the same
            torch threads, so the stored numbers do not depend on it).
    """
    parser.add_argument(
        "--executor",
        choices=[k.value for k in ExecutorKind],
        default=default.value,
        help=f"where units run: here one by one, in worker processes here, or on Ray "
        f"({RAY_INSTALL}; default: {default.value})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes at once with --executor processes (default: CPUs / --cpus-per-unit)",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="Ray cluster (from `ray start --head`); default: a private one",
    )
    parser.add_argument(
        "--cpus-per-unit",
        type=int,
        default=None,
        help="torch threads of a unit on every executor, CPUs a Ray task declares (default 1)",
    )
    parser.add_argument(
        "--gpus-per-unit",
        type=float,
        default=0.0,
        help="GPUs a Ray task declares, for --device cuda on Ray (e.g. 0.25: four units a GPU)",
    )


def settings_from(args: argparse.Namespace, devices: Iterable[str] = ()) -> ExecutorSettings:
    """The executor of ``add_executor_arguments``' options.

    Raises:
        ValueError: a bad combination, e.g. units that train on CUDA (``args.device`` or one of
            ``devices``, a grid's) on Ray without ``--gpus-per-unit``.
    """
    settings = ExecutorSettings(
        kind=ExecutorKind(args.executor),
        address=args.address,
        cpus_per_unit=args.cpus_per_unit,
        workers=args.workers,
        gpus_per_unit=args.gpus_per_unit,
    )
    wanted = {*map(str, devices), str(getattr(args, "device", None) or "cpu")}
    on_cuda = sorted(device for device in wanted if device.startswith("cuda"))
    if settings.kind is ExecutorKind.RAY and not settings.gpus_per_unit and on_cuda:
        raise ValueError(
            f"--device {on_cuda[0]} on Ray needs --gpus-per-unit: Ray hides the GPUs from a "
            "task that declares none"
        )
    return settings


class SweepError(RuntimeError):
    """Some units failed; the message lists them with their errors (the others were stored)."""


@dataclass
class SweepReport:
    """What :func:`drive` did: the keys of the units that finished and the failures."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"{len(self.failed)} of {len(self.done) + len(self.failed)} units failed:"]
        for key, error in self.failed.items():
            last = error.strip().splitlines()[-1] if error.strip() else "(no message)"
            lines.append(f"  {key}: {last}")
        return "\n".join(lines)


def drive(
    executor: Executor,
    units: Sequence[Unit],
    on_result: Callable[[Unit, Any], None],
    description: str = "sweep",
    progress: bool = True,
) -> SweepReport:
    """Run ``units`` on ``executor``; ``on_result(unit, value)`` stores each result as it comes.

    Raises:
        SweepError: after every unit ran, when any failed (the message is the summary; the units
            that finished are stored, so re-running the command retries only the failed ones).
    """
    report = SweepReport()
    bar = tqdm(
        total=len(units), desc=description, unit="unit", disable=not progress, file=sys.stderr
    )
    with bar:
        for outcome in executor.run(units):
            if outcome.error is None:
                on_result(outcome.unit, outcome.value)
                report.done.append(outcome.unit.key)
            else:
                report.failed[outcome.unit.key] = outcome.error
                bar.set_postfix(failed=len(report.failed))
            bar.update()
    if report.failed:
        raise SweepError(report.summary())
    return report


def run_sweep(
    settings: ExecutorSettings,
    units: Sequence[Unit],
    on_result: Callable[[Unit, Any], None],
    description: str = "sweep",
    progress: bool = True,
) -> SweepReport:
    """:func:`drive` on a fresh executor of ``settings``, closed afterwards (even on error)."""
    if not units:
        return SweepReport()
    executor = make_executor(settings)
    try:
        return drive(executor, units, on_result, description, progress)
    finally:
        executor.close()
