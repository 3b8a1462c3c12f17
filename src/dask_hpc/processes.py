"""The scheduler and worker processes, forked from a rank that has already imported Dask.

Forking skips the ~0.3 s of CPU that every fresh Python process pays to import
``distributed``: 16 workers start about as fast as one. Each child builds its own event loop
and exits with a status that tells the rank why it ended (see ``EXIT_*``).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

import dask.config
from distributed import Scheduler, Worker
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.security import Security

from .plan import ProcessSpec

EXIT_CLOSED = 0  # closed by the scheduler or by a signal: a clean end
EXIT_FAILED = 1  # could not start
EXIT_SCHEDULER_LOST = 4  # the scheduler went away without closing the worker
CLEAN_REASONS = ("scheduler-close", "start-cluster-signal", "scheduler-shutdown")


_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int, parent: int) -> None:
    """Have Linux send ``sig`` to this process when ``parent`` (its rank) dies.

    Without it a rank killed with SIGKILL (OOM killer, a launcher's kill) leaves its scheduler
    or workers running, orphaned, until the job ends. Call it in the child, right after fork.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: best effort
        return
    if os.getppid() != parent:  # the rank died before prctl took effect
        os.kill(os.getpid(), sig)


def fork(target: Callable[..., int], *args: Any) -> int:
    """Run ``target(*args)`` in a forked child that dies with this process; return its pid."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = EXIT_FAILED
    try:
        die_with_parent(signal.SIGKILL, parent)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        code = target(*args)
    except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _prepare(spec: ProcessSpec) -> None:
    os.environ.update(spec.env)
    dask.config.refresh()
    level = str(dask.config.get("hpc.log-level", "warning")).upper()
    logging.getLogger("distributed").setLevel(level)


def _on_signals(callback: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, callback)


class _Reporter(SchedulerPlugin):
    """Tells the rank, over a pipe, which workers come and go."""

    name = "dask-hpc-reporter"

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **event: Any) -> None:
        os.write(self.fd, (json.dumps(event) + "\n").encode())

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self.send(event="add", name=str(scheduler.workers[worker].name), address=worker)

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        self.send(event="remove", address=worker)


def scheduler_main(spec: ProcessSpec, events_fd: int) -> int:
    """Run the scheduler until it is closed (by a client, or SIGTERM from the rank)."""
    _prepare(spec)
    options = spec.options

    async def serve() -> None:
        scheduler = Scheduler(
            host=options["host"],
            port=options["port"],
            protocol=options["protocol"],
            dashboard_address=options["dashboard_address"],
            security=Security(),
        )
        reporter = _Reporter(events_fd)
        scheduler.add_plugin(reporter)
        _on_signals(lambda: asyncio.ensure_future(scheduler.close(reason="start-cluster-signal")))
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGUSR1, lambda: close_workers(scheduler)
        )
        await scheduler
        reporter.send(
            event="started",
            address=scheduler.address,
            dashboard_port=scheduler.services["dashboard"].port
            if "dashboard" in scheduler.services
            else None,
        )
        await scheduler.finished()

    asyncio.run(serve())
    return EXIT_CLOSED


def close_workers(scheduler: Scheduler) -> None:
    """Close every worker, keeping the scheduler up, so that the rank can see them go."""
    for comm in list(scheduler.stream_comms.values()):
        if not comm.closed():
            comm.send({"op": "close", "reason": "scheduler-close"})


class _TrackedWorker(Worker):
    """A Worker that remembers why it closed."""

    close_reason = ""

    async def close(self, *args: Any, reason: str = "worker-close", **kwargs: Any) -> Any:
        if not self.close_reason:
            self.close_reason = reason
        return await super().close(*args, reason=reason, **kwargs)


def _worker_kwargs(spec: ProcessSpec, address: str) -> dict[str, Any]:
    options = spec.options
    kwargs: dict[str, Any] = {
        "scheduler_ip": address,
        "name": spec.name,
        "nthreads": options["nthreads"],
        "memory_limit": options["memory_limit"],
        "resources": options["resources"],
        "local_directory": options["local_directory"],
        "death_timeout": options["death_timeout"],
        "host": options["host"],
        "protocol": options["protocol"],
        "security": Security(),
        "dashboard": False,
    }
    if options["worker_class"] == "dask_cuda":
        kwargs.update(_cuda_kwargs(options))
    return kwargs


def _cuda_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """What dask-cuda's own worker adds for one GPU: device-aware data, plugins, CUDA context."""
    from dask_cuda.utils import cuda_visible_devices, nvml_device_index
    from dask_cuda.worker_common import worker_data_function, worker_plugins

    device = nvml_device_index(0, cuda_visible_devices(0))
    plugins = worker_plugins(
        device_index=device,
        rmm_initial_pool_size=None,
        rmm_maximum_pool_size=None,
        rmm_managed_memory=False,
        rmm_async_alloc=False,
        rmm_release_threshold=None,
        rmm_log_directory=None,
        rmm_track_allocations=False,
        rmm_allocator_external_lib_list=None,
        pre_import=None,
        enable_cudf_spill=False,
        cudf_spill_stats=0,
    )
    data = worker_data_function(device_memory_limit="default", memory_limit=options["memory_limit"])
    return {
        "plugins": plugins,
        "data": data(device),
        "preload": ["dask_cuda.initialize"],
        "preload_argv": ["--create-cuda-context"],
    }


def worker_main(spec: ProcessSpec, address: str) -> int:
    """Run one worker until the scheduler closes it, it loses the scheduler, or a signal."""
    _prepare(spec)

    async def serve() -> int:
        worker = _TrackedWorker(**_worker_kwargs(spec, address))
        _on_signals(
            lambda: asyncio.ensure_future(worker.close(reason="start-cluster-signal", nanny=False))
        )
        await worker
        await worker.finished()
        return EXIT_CLOSED if worker.close_reason in CLEAN_REASONS else EXIT_SCHEDULER_LOST

    try:
        return asyncio.run(serve())
    except (OSError, asyncio.TimeoutError, TimeoutError) as error:
        print(
            f"start-cluster: worker {spec.name}: cannot reach the scheduler at {address}: {error}",
            file=sys.stderr,
        )
        return EXIT_SCHEDULER_LOST
