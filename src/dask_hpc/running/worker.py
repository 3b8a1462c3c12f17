"""The Worker class that start-cluster runs: Dask's own, with a few small additions.

It is importable by name, so a Nanny's worker process (started from multiprocessing's
forkserver) unpickles it like ``distributed.Worker``.
"""

from __future__ import annotations

import contextvars
import logging
import os
from typing import Any

import dask.config
from distributed import Worker
from distributed.core import Status
from distributed.utils import get_ip

from ..at_scale import log_summary
from ..at_scale.heartbeats import StreamHeartbeats
from ..at_scale.lighter_tls import Security

# Reasons a worker gives when its scheduler went away without closing it.
LOST_SCHEDULER_REASONS = ("worker-handle-scheduler-connection-broken", "worker-heartbeat-error")


# The worker whose heartbeat is running in the current task (a context variable: the Workers
# that share an event loop each run their heartbeat in a task of its own).
_heartbeat_of: contextvars.ContextVar[Worker | None] = contextvars.ContextVar(
    "dask_hpc_heartbeat_of", default=None
)
_CLOSING = (Status.closing, Status.closing_gracefully, Status.closed)
# What Dask logs when a heartbeat was in flight as its worker closed: the worker's own close
# broke the heartbeat's connection (an error with a traceback), or the scheduler, which had
# already removed the worker, answered "missing" (a warning).
_HEARTBEAT_AT_CLOSE = (
    "Failed to communicate with scheduler during heartbeat",
    "Scheduler was unaware of this worker",
)


class _ClosingHeartbeatFilter(logging.Filter):
    """Drops Dask's heartbeat error for a heartbeat that its own worker's close cut short.

    A clean shutdown of 1,000 workers printed hundreds of these tracebacks (benchmarks.scale):
    a worker's heartbeat is a round trip to a scheduler that is busy closing every worker, so
    many are in flight when the close arrives. The same message from a running worker (the
    scheduler really unreachable) still goes through.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        worker = _heartbeat_of.get()
        return not (
            worker is not None
            and worker.status in _CLOSING
            and str(record.msg).startswith(_HEARTBEAT_AT_CLOSE)
        )


logging.getLogger("distributed.worker").addFilter(_ClosingHeartbeatFilter())


# Dask's warnings about routine events, kept from the terminal (and kept in Dask's own logs):
# (logger, the start of the message or its template). Under `dask scheduler` + `dask worker`
# they end up in the scheduler's and workers' own logs; here those share COMMAND's terminal.
ROUTINE = (
    # every P2P shuffle (rechunk, merge, set_index), twice
    ("distributed.shuffle._scheduler_plugin", "Shuffle %s initialized by task"),
    ("distributed.shuffle._scheduler_plugin", "Shuffle %s deactivated due to stimulus"),
    # a task still running when its worker closes ("should exclusively happen in close()")
    ("distributed.worker.state_machine", "Async instruction for "),
    # a worker's death and restart: start-cluster says it in one line of its own
    ("distributed.nanny", "Restarting worker (status="),
)


# ... and once this process's workers are being closed for good: a task still running then
# keeps its worker's process alive (Python joins the executor's threads), and the Nanny kills
# it after its close timeout.
ROUTINE_AT_CLOSE = (("distributed.nanny", "Worker process still alive after"),)


class _RoutineFilter(logging.Filter):
    """Keeps Dask's routine warnings (``ROUTINE``) from a terminal handler."""

    closing = False  # see closing_for_good()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        routine = (*ROUTINE, *ROUTINE_AT_CLOSE) if self.closing else ROUTINE
        return not any(record.name == name and msg.startswith(start) for name, start in routine)


_ROUTINE_FILTER = _RoutineFilter()


def closing_for_good() -> None:
    """This process's workers are being closed (the cluster ends, or they are retired)."""
    _ROUTINE_FILTER.closing = True


def quiet_stderr(level: str | None = None) -> None:
    """Show ``hpc.log-level`` and above on stderr, keeping Dask's own logger levels.

    The loggers stay at Dask's levels (info), so ``client.get_worker_logs()`` and
    ``get_scheduler_logs()`` hold what they hold under ``dask worker``; only the stream to the
    terminal is filtered, routine warnings (``ROUTINE``) included, and Dask's per-worker and
    per-connection warnings are summarised (``log_summary``).
    """
    level = str(level or dask.config.get("hpc.log-level", "warning")).upper()
    for name in ("distributed", "distributed.client", "bokeh", "tornado"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                handler.setLevel(level)
                if level not in ("DEBUG", "INFO"):
                    handler.addFilter(_ROUTINE_FILTER)
                log_summary.attach(handler)  # at any level: a flood is never useful


def worker_kwargs(options: dict[str, Any], address: str) -> dict[str, Any]:
    """Keyword arguments that a Worker and a Nanny take alike, from a plan's worker options.

    Without an interface the worker listens on the address that routes to the scheduler, as
    Dask's Nanny picks for itself, and so do its HTTP routes: never on 0.0.0.0.
    """
    host = options["host"] or get_ip(address.split("://")[-1].rsplit(":", 1)[0].strip("[]"))
    return {
        "nthreads": options["nthreads"],
        "memory_limit": options["memory_limit"],
        "local_directory": options["local_directory"],
        "death_timeout": options["death_timeout"],
        "host": host,
        "protocol": options["protocol"],
        "security": Security(),
        "dashboard": False,
        "dashboard_address": f"{host}:0",
    }


def worker_class(options: dict[str, Any]) -> type[HpcWorker]:
    return BoundWorker if options["keep_cpus"] else HpcWorker


class HpcWorker(Worker):
    """``distributed.Worker``, quiet on stderr, remembering why it closed.

    A heartbeat that the worker's own close cuts short is not reported as an error. Heartbeats
    go on the worker's stream to a scheduler that takes them there (``heartbeats``).

    ``keep_cpus``: the CPUs the launcher bound this process to, re-applied once the worker's
    plugins ran (dask-cuda's ``CPUAffinity`` plugin would otherwise move a rank that
    ``mpiexec``/``srun`` bound to one socket onto the GPU's whole NUMA node).
    """

    keep_cpus = False
    close_reason = ""
    _registered_flag: str | None = None
    _asked = True  # whether it asked to send heartbeats on its stream (False once built)

    def __init__(self, *args: Any, registered_flag: str | None = None, **kwargs: Any) -> None:
        quiet_stderr()
        self._launcher_cpus = os.sched_getaffinity(0)
        self._registered_flag = registered_flag
        super().__init__(*args, **kwargs)
        self.scheduler = StreamHeartbeats(self)  # type: ignore[assignment]
        self._asked = False

    @Worker.status.setter  # type: ignore[attr-defined,untyped-decorator]
    def status(self, value: Status) -> None:
        """Dask's status change; the first ``running`` also marks ``registered_flag``.

        Dask sets ``running`` the moment the scheduler accepted the registration, before the
        worker reads any task from it, so a task that kills the process next (``os._exit`` in a
        native library) cannot come first. Its Nanny's ``instantiate`` returns only later (it
        polls a queue every 50 ms), which is why the Nanny host cannot tell from that alone a
        worker killed by its first task from one that never reached the scheduler.
        """
        Worker.status.fset(self, value)  # type: ignore[attr-defined]
        if value == Status.running and not self._asked:
            self._asked = True  # registered: its stream to the scheduler is open
            self.scheduler.ask()
        if value == Status.running and self._registered_flag:
            flag, self._registered_flag = self._registered_flag, None
            try:
                os.close(os.open(flag, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            except OSError:
                pass  # unwritable: the Nanny counts this start as one that did not connect

    async def start_unsafe(self) -> HpcWorker:
        await super().start_unsafe()
        if self.keep_cpus:
            os.sched_setaffinity(0, self._launcher_cpus)
        return self

    async def heartbeat(self) -> None:
        token = _heartbeat_of.set(self)
        try:
            await super().heartbeat()
        finally:
            _heartbeat_of.reset(token)

    async def close(self, *args: Any, reason: str = "worker-close", **kwargs: Any) -> Any:
        if not self.close_reason:
            self.close_reason = reason
        if isinstance(self.scheduler, StreamHeartbeats):
            self.scheduler.cut_short()
        try:
            return await super().close(*args, reason=reason, **kwargs)
        finally:
            log_summary.flush()  # what its listener refused, before the process ends


class BoundWorker(HpcWorker):
    """An :class:`HpcWorker` on a rank the launcher bound to some CPUs: it keeps them."""

    keep_cpus = True
