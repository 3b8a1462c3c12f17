"""The Worker class that start-cluster runs: Dask's own, with three small additions.

It is importable by name, so a Nanny's worker process (started from multiprocessing's
forkserver) unpickles it like ``distributed.Worker``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import dask.config
from distributed import Worker
from distributed.security import Security
from distributed.utils import get_ip

# Reasons a worker gives when its scheduler went away without closing it.
LOST_SCHEDULER_REASONS = ("worker-handle-scheduler-connection-broken", "worker-heartbeat-error")


def quiet_stderr(level: str | None = None) -> None:
    """Show ``hpc.log-level`` and above on stderr, keeping Dask's own logger levels.

    The loggers stay at Dask's levels (info), so ``client.get_worker_logs()`` and
    ``get_scheduler_logs()`` hold what they hold under ``dask worker``; only the stream to the
    terminal is filtered.
    """
    level = str(level or dask.config.get("hpc.log-level", "warning")).upper()
    for name in ("distributed", "distributed.client", "bokeh", "tornado"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                handler.setLevel(level)


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

    ``keep_cpus``: the CPUs the launcher bound this process to, re-applied once the worker's
    plugins ran (dask-cuda's ``CPUAffinity`` plugin would otherwise move a rank that
    ``mpiexec``/``srun`` bound to one socket onto the GPU's whole NUMA node).
    """

    keep_cpus = False
    close_reason = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        quiet_stderr()
        self._launcher_cpus = os.sched_getaffinity(0)
        super().__init__(*args, **kwargs)

    async def start_unsafe(self) -> HpcWorker:
        await super().start_unsafe()
        if self.keep_cpus:
            os.sched_setaffinity(0, self._launcher_cpus)
        return self

    async def close(self, *args: Any, reason: str = "worker-close", **kwargs: Any) -> Any:
        if not self.close_reason:
            self.close_reason = reason
        return await super().close(*args, reason=reason, **kwargs)


class BoundWorker(HpcWorker):
    """An :class:`HpcWorker` on a rank the launcher bound to some CPUs: it keeps them."""

    keep_cpus = True
