"""The scheduler's process, and the plain workers of ``--no-nanny``, forked from the rank.

The scheduler's process imports this module (and Dask) itself, right after the fork, while
the rank makes the cluster's certificates. ``--no-nanny`` workers are forked from a rank that
has imported it: forking skips the ~0.3 s of CPU that every fresh Python process pays to
import ``distributed``. Each child builds its own event loop and exits with a status that
tells the rank why it ended (see ``children.EXIT_*``).
"""

from __future__ import annotations

import asyncio
import gc
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

from . import dashboard, heartbeats, log_summary
from .children import EXIT_CLOSED, EXIT_SCHEDULER_LOST
from .errors import say
from .lighter_tls import Security
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


class _DistinctVersions(SchedulerPlugin):
    """The connected workers grouped by their package versions, kept up to date as they come
    and go (the scheduler's add_worker and remove_worker hooks: O(1) per worker)."""

    name = "dask-hpc-distinct-versions"

    def __init__(self) -> None:
        self.key_of: dict[str, str] = {}  # worker -> its versions, as a string
        self.holders: dict[str, dict[str, None]] = {}  # versions -> their workers, in order

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self._add(worker, scheduler.workers[worker].versions)

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        self._remove(worker)

    def _add(self, worker: str, versions: dict | None) -> None:
        # A string: its hash is computed once (a tuple's is computed on every lookup).
        key = repr(sorted(versions["packages"].items())) if versions else "UNKNOWN"
        self.key_of[worker] = key
        self.holders.setdefault(key, {})[worker] = None

    def _remove(self, worker: str) -> None:
        key = self.key_of.pop(worker, None)
        if key is not None:
            del self.holders[key][worker]
            if not self.holders[key]:
                del self.holders[key]

    def representatives(self, workers: dict[str, Any]) -> dict[str, Any]:
        """One worker (the earliest) of each distinct set of versions among ``workers``.

        The hooks keep the groups in step with the scheduler's workers, so this is O(number of
        distinct sets). ``workers`` of another size (the hooks have not seen them) are caught
        up with first, in O(W): a comparison of every worker's keys on every join was 0.10 s
        of the scheduler's CPU for 2,000 joins (2.5 s at 10,000).
        """
        if len(workers) != len(self.key_of):
            for gone in self.key_of.keys() - workers.keys():
                self._remove(gone)
            for new in workers.keys() - self.key_of.keys():
                self._add(new, workers[new])
        firsts = (next(iter(holders)) for holders in self.holders.values())
        return {worker: workers[worker] for worker in firsts}


class _LongLivedOutOfGC(SchedulerPlugin):
    """Keeps the scheduler's long-lived objects out of Python's full garbage collections.

    A full collection walks every object of the process, and the scheduler holds hundreds per
    worker: each one stalls its event loop for a time that grows with the cluster. Dask's
    modules, the dashboard, and the workers connected so far (each time their number grew by a
    tenth) are moved to the collector's permanent generation (``gc.freeze``, O(1)), so a full
    collection walks what was made since. Measured with benchmarks/scale.py at 1,000 workers
    (the scheduler's thread CPU in the collector): 5 full collections of ~107 ms, 0.72 s of GC
    in all; frozen, 3 of ~46 ms, 0.32 s. What is frozen is never collected: at most the cyclic
    garbage of the moment, ~50 times up to 10,000 workers, and never while the scheduler holds
    tasks (a computation's task states, cyclic once released, would stay in memory).
    """

    name = "dask-hpc-long-lived"

    def __init__(self) -> None:
        gc.freeze()
        self.next_freeze = 64  # workers

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        if len(scheduler.workers) >= self.next_freeze and not scheduler.tasks:
            self.next_freeze = int(self.next_freeze * 1.1) + 1
            gc.freeze()


def compare_distinct_versions() -> _DistinctVersions:
    """Have Dask's version check look at each distinct set of worker versions once.

    ``Scheduler.add_worker`` compares the joining worker's packages with those of every
    connected worker (``distributed.versions.error_message``): O(W) per worker, O(W^2) per
    start. Measured with benchmarks/scale.py: half the scheduler's CPU at 2,000 workers. The
    same warnings come from one worker per distinct set of versions. Returns the groups: a
    scheduler plugin that keeps them up to date.
    """
    from distributed import versions

    original = versions.error_message
    distinct = _DistinctVersions()

    def error_message(scheduler: Any, workers: dict, source: Any, source_name: str = "Client"):
        few = distinct.representatives(workers)
        return original(scheduler, few, source, source_name=source_name)

    versions.error_message = error_message
    return distinct


def scheduler_main(spec: ProcessSpec, events_fd: int) -> int:
    """Run the scheduler until it is closed (by a client, or SIGTERM from the rank)."""
    _prepare(spec)
    distinct_versions = compare_distinct_versions()
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
        scheduler.add_plugin(distinct_versions)
        scheduler.add_plugin(_LongLivedOutOfGC())
        heartbeats.serve(scheduler)
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
        reporter.flush()  # the last workers' removals

    try:
        asyncio.run(serve())
    finally:
        log_summary.flush()
    return EXIT_CLOSED


def close_workers(scheduler: Scheduler) -> None:
    """Close every worker (and its Nanny), keeping the scheduler up, so the rank sees them go.

    The cluster is ending, so the scheduler stops telling the remaining workers about each one
    that leaves: Dask's ``remove_worker`` sends every remaining worker a ``remove-worker``
    message, O(W^2) over a shutdown. Measured with benchmarks/scale.py at 1,000 workers:
    499,500 messages, 1.2 s of the scheduler's CPU, and each worker handling up to 999 of them.
    Nor does it warn about the TLS handshakes that closing workers break off (their heartbeat's
    connection): 161 warnings on the terminal at 1,000 workers.
    """
    log_summary.mute("tls-refused")
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
        say(f"worker {spec.name}: cannot reach the scheduler at {address}: {error}")
        return EXIT_SCHEDULER_LOST
    finally:
        log_summary.flush()
