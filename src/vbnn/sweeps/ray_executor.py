"""The Ray executor: every unit a Ray task; loaded only for ``--executor ray`` (Ray is optional).

Each unit is submitted as a task with ``num_cpus = unit.threads`` (torch runs on as many
threads there, as on every executor: ``contracts.call_with_threads``) and ``max_retries``. Ray
reruns a task whose worker process died (killed, out of memory) or whose node left the cluster
(preempted, crashed, ``ray stop``), on any node with the CPUs free, so a unit in flight on a
lost node still reaches the driver, once: a task's result is one object, and the driver takes
each unit's outcome from it exactly once. An exception raised by the unit itself is not retried:
it is the unit's outcome and goes in the failure summary. Results come back to the driver as
they finish (``ray.wait``); the driver alone writes them, so a sweep on a cluster of many nodes
stores what a local one stores, in the driver's database only.

When Ray gives up on a unit (its worker or node was lost more than ``max_retries`` times, or
its result was lost with a node and could not be made again), the unit is reported as failed
with the reason, the others go on, and re-running the command runs it again. A driver killed
mid-sweep loses only the units in flight (Ray cancels a dead driver's tasks); re-running the
command skips every unit already stored.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator, Sequence

import ray

from vbnn.sweeps.contracts import ExecutorSettings, Outcome, Unit, call_with_threads

_remote_call = ray.remote(call_with_threads)
# the client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS_FRAME = 4  # the type byte of a frame's 9-byte header


class RayExecutor:
    """Runs units as Ray tasks on the cluster at ``settings.address`` (or a private one).

    Joins an already initialised Ray (e.g. a test's) and leaves it running; otherwise connects
    (``ray.init``) and disconnects in :meth:`close`, which also stops a private instance.
    """

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self.owns_connection = not ray.is_initialized()
        if self.owns_connection:
            private = settings.address is None
            if not private:
                check_reachable(settings.address, settings.connect_timeout)
            # "local": a new private instance, even when a cluster started on this machine
            # (``ray start``, a test cluster) is still registered, which ``None`` would join
            ray.init(
                address="local" if private else settings.address,
                num_cpus=settings.num_cpus if private else None,
                include_dashboard=False if private else None,
                logging_level=logging.WARNING,
                log_to_driver=True,
            )

    def run(self, units: Sequence[Unit]) -> Iterator[Outcome]:
        """Submit every unit, then yield one outcome a unit as its task finishes."""
        pending = {}
        for unit in units:
            cpus = unit.threads
            options = {
                "num_cpus": cpus,
                "max_retries": self.settings.max_retries,
                "name": unit.key,
            }
            if self.settings.gpus_per_unit:
                options["num_gpus"] = self.settings.gpus_per_unit
            reference = _remote_call.options(**options).remote(unit.function, cpus, *unit.arguments)
            pending[reference] = unit
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            unit = pending.pop(ready[0])
            try:
                yield Outcome(unit, ray.get(ready[0]))
            except ray.exceptions.RayError as error:
                yield Outcome(unit, error=failure_message(error, self.settings.max_retries))

    def close(self) -> None:
        if self.owns_connection:
            ray.shutdown()


def check_reachable(address: str, timeout: float) -> None:
    """Refuse within about ``timeout`` seconds a Ray address where no Ray cluster answers.

    ``ray.init`` on such an address waits many minutes. Ray's head (``ray start --head``,
    "host:port") and its client server ("ray://host:port", port 10001 by default) are gRPC
    servers, which answer the HTTP/2 connection preface (RFC 9113, section 3.4) with a SETTINGS
    frame; so a TCP connection is opened, the preface sent, and the first frame's type read
    (with ``RAY_USE_TLS`` set, the connection alone). Other addresses ("auto", "local") are
    Ray's to resolve.

    Raises:
        ConnectionError: nothing reachable there, or something that does not answer as gRPC
            does (the address named, with how to start a cluster or run without one).
    """
    client = address.startswith("ray://")
    location = address.removeprefix("ray://")
    host, colon, port = location.rpartition(":")
    if not colon and client:
        host, port = location, "10001"
    if not host or not port.isdigit():
        return
    where = f"--address {address}"
    advice = (
        f"Start a cluster on that machine with `ray start --head --port {port}`, or leave "
        "--address out to run on a private Ray instance here"
    )
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as error:
        reason = _reason(error, timeout)
        raise ConnectionError(
            f"{where}: no Ray cluster reachable at {host}:{port} ({reason}). {advice}"
        ) from None
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        connection.close()  # a TLS handshake comes before any frame: reachable is all we know
        return
    with connection:
        try:
            connection.sendall(HTTP2_PREFACE)
            head = _receive(connection, 9)
        except OSError as error:
            head, reason = b"", _reason(error, timeout)
        else:
            reason = "it answers, but not with an HTTP/2 SETTINGS frame"
    if len(head) < 9 or head[3] != SETTINGS_FRAME:
        raise ConnectionError(
            f"{where}: something listens at {host}:{port}, but not a Ray cluster ({reason}). "
            f"{advice}"
        )


def _reason(error: OSError, timeout: float) -> str:
    if isinstance(error, TimeoutError):
        return f"no answer within {timeout:g} s"
    return error.strerror or type(error).__name__


def _receive(connection: socket.socket, size: int) -> bytes:
    """Up to ``size`` bytes (fewer when the peer closes first)."""
    data = b""
    while len(data) < size:
        part = connection.recv(size - len(data))
        if not part:
            break
        data += part
    return data


def failure_message(error: ray.exceptions.RayError, max_retries: int) -> str:
    """What the failure summary says of a unit Ray did not finish.

    ``RayTaskError`` is the unit's own exception (its traceback, as Ray formats it); any other
    ``RayError`` (``WorkerCrashedError``, ``NodeDiedError``, ``ObjectLostError``, ...) means
    Ray lost the unit's worker, node or result and gave up after ``max_retries`` reruns.
    """
    if isinstance(error, ray.exceptions.RayTaskError):
        return str(error)
    return (
        f"Ray gave up on the unit after {max_retries} retries "
        f"({type(error).__name__}: its worker, node or result was lost): {error}"
    )
