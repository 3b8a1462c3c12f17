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
import warnings
from collections.abc import Callable
from typing import Any

import dask.config
from distributed import Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.utils import get_ip

from ..at_scale import (
    dependencies,
    event_loop,
    heartbeats,
    log_summary,
    many_workers,
    sends,
    stealing,
)
from ..at_scale.closing import close_on_signal, close_workers
from ..at_scale.lighter_tls import Security
from ..errors import say
from ..guard import dashboard
from ..planning.plan import ProcessSpec
from . import given_up
from .children import EXIT_CLOSED, EXIT_SCHEDULER_LOST
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
    """Tells the rank, over a pipe, which workers come and go.

    The events of one turn of the event loop go in one write: a write per event woke the rank
    4,000 times for 2,000 workers coming and going, and py-spy found the scheduler's loop in
    those writes in 6% of its samples (2,000 workers on 2 busy cores).
    """

    name = "dask-hpc-reporter"

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending: list[str] = []

    def send(self, **event: Any) -> None:
        if not self.pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self.pending.append(json.dumps(event) + "\n")

    def flush(self) -> None:
        data, self.pending = "".join(self.pending).encode(), []
        while data:
            data = data[os.write(self.fd, data) :]

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self.send(event="add", name=str(scheduler.workers[worker].name), address=worker)

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        self.send(event="remove", address=worker)


def scheduler_main(spec: ProcessSpec, events_fd: int, control_fd: int) -> int:
    """Run the scheduler until it is closed (by a client, or SIGTERM from the rank); the rank
    names on ``control_fd`` the workers of ranks it gave up (``given_up``)."""
    _prepare(spec)
    options = spec.options

    # A taken dashboard port is reported by the rank in one line (runtime.py), not by Dask's
    # "Perhaps you already have a cluster running?" warning.
    warnings.filterwarnings("ignore", message="Port .* is already in use")

    async def serve() -> None:
        scheduler, token = dashboard.gated_scheduler(
            host=options["host"] or get_ip(),  # the node's routed address, not 0.0.0.0
            port=options["port"],
            protocol=options["protocol"],
            dashboard_address=options["dashboard_address"],
            security=Security(),
        )
        reporter = _Reporter(events_fd)
        scheduler.add_plugin(reporter)
        many_workers.install(scheduler)
        dependencies.install(scheduler)
        stealing.install(scheduler)
        sends.install(scheduler)
        heartbeats.serve(scheduler)
        given_up.GivenUp(scheduler, control_fd)
        _on_signals(lambda: asyncio.ensure_future(close_on_signal(scheduler)))
        closing: list[asyncio.Task[None]] = []  # (a task is only weakly held by its loop)
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGUSR1, lambda: closing.append(close_workers(scheduler))
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
        reporter.flush()  # the last workers' removals

    try:
        # a loop that does not run thousands of handshakes in a turn
        event_loop.run(serve(), few_events_per_turn=True)
    finally:
        log_summary.flush()
    return EXIT_CLOSED


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
        return event_loop.run(serve())
    except (OSError, asyncio.TimeoutError, TimeoutError) as error:
        say(f"worker {spec.name}: cannot reach the scheduler at {address}: {error}")
        return EXIT_SCHEDULER_LOST
    finally:
        log_summary.flush()
