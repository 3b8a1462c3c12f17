"""The scheduler's process, and the plain workers of ``--no-nanny``, forked from the rank.

The scheduler's process imports this module (and Dask) itself, right after the fork, while
the rank makes the cluster's certificates. ``--no-nanny`` workers are forked from a rank that
has imported it: forking skips the ~0.3 s of CPU that every fresh Python process pays to
import ``distributed``. Each child builds its own event loop and exits with a status that
tells the rank why it ended (see ``children.EXIT_*``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

import dask.config
from distributed import Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.security import Security
from distributed.utils import get_ip

from . import dashboard
from .children import EXIT_CLOSED, EXIT_SCHEDULER_LOST
from .plan import ProcessSpec
from .worker import LOST_SCHEDULER_REASONS, quiet_stderr, worker_class, worker_kwargs


def _prepare(spec: ProcessSpec) -> None:
    os.environ.update(spec.env)
    dask.config.refresh()
    quiet_stderr()


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


def compare_distinct_versions() -> None:
    """Have Dask's version check look at each distinct set of worker versions once.

    ``Scheduler.add_worker`` compares the joining worker's packages with those of every
    connected worker (``distributed.versions.error_message``): O(W) per worker, O(W^2) per
    start. Measured with benchmarks/scale.py: half the scheduler's CPU at 2,000 workers. The
    same warnings come from one worker per distinct set of versions.
    """
    from distributed import versions

    original = versions.error_message
    keys: dict[str, Any] = {}  # worker -> its packages, frozen

    def error_message(scheduler: Any, workers: dict, source: Any, source_name: str = "Client"):
        for gone in keys.keys() - workers.keys():
            del keys[gone]
        for new in workers.keys() - keys.keys():
            packages = (workers[new] or {}).get("packages") or {}
            keys[new] = tuple(sorted(packages.items(), key=lambda item: item[0]))
        distinct: dict[Any, str] = {}
        for worker, key in keys.items():
            distinct.setdefault(key, worker)
        few = {w: workers[w] for w in distinct.values()}
        return original(scheduler, few, source, source_name=source_name)

    versions.error_message = error_message


def scheduler_main(spec: ProcessSpec, events_fd: int) -> int:
    """Run the scheduler until it is closed (by a client, or SIGTERM from the rank)."""
    _prepare(spec)
    compare_distinct_versions()
    options = spec.options

    # A taken dashboard port is reported by the rank in one line (runtime.py), not by Dask's
    # "Perhaps you already have a cluster running?" warning.
    warnings.filterwarnings("ignore", message="Port .* is already in use")

    async def serve() -> None:
        scheduler = Scheduler(
            host=options["host"] or get_ip(),  # the node's routed address, not 0.0.0.0
            port=options["port"],
            protocol=options["protocol"],
            dashboard_address=options["dashboard_address"],
            security=Security(),
        )
        token = dashboard.new_token()
        dashboard.protect(scheduler.http_server, token)  # before any request is served
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
            dashboard_token=token,
        )
        await scheduler.finished()

    asyncio.run(serve())
    return EXIT_CLOSED


def close_workers(scheduler: Scheduler) -> None:
    """Close every worker (and its Nanny), keeping the scheduler up, so the rank sees them go.

    The cluster is ending, so the scheduler stops telling the remaining workers about each one
    that leaves: Dask's ``remove_worker`` sends every remaining worker a ``remove-worker``
    message, O(W^2) over a shutdown. Measured with benchmarks/scale.py at 1,000 workers:
    499,500 messages, 1.2 s of the scheduler's CPU, and each worker handling up to 999 of them.
    """
    send = scheduler.worker_send

    def worker_send(worker: str, msg: dict[str, Any]) -> None:
        if msg.get("op") != "remove-worker":
            send(worker, msg)

    scheduler.worker_send = worker_send  # type: ignore[method-assign]
    for address in list(scheduler.workers):
        scheduler.close_worker(address)


def worker_main(spec: ProcessSpec, address: str) -> int:
    """``--no-nanny``: run one worker in this process until it is closed or loses the scheduler.

    Like ``dask worker --no-nanny``, nothing restarts it.
    """
    _prepare(spec)

    async def serve() -> int:
        options = spec.options
        worker = worker_class(options)(
            address,
            name=spec.name,
            resources=options["resources"],
            **worker_kwargs(options, address),
        )
        _on_signals(
            lambda: asyncio.ensure_future(worker.close(reason="start-cluster-signal", nanny=False))
        )
        await worker
        await worker.finished()
        lost = worker.close_reason in LOST_SCHEDULER_REASONS
        return EXIT_SCHEDULER_LOST if lost else EXIT_CLOSED

    try:
        return asyncio.run(serve())
    except (OSError, asyncio.TimeoutError, TimeoutError) as error:
        print(
            f"start-cluster: worker {spec.name}: cannot reach the scheduler at {address}: {error}",
            file=sys.stderr,
        )
        return EXIT_SCHEDULER_LOST
