"""A cluster's end at scale: every worker closed, the scheduler kept up, without Dask's O(W)
loops per leaving worker and without a turn of the event loop that tells thousands at once.

Dask's ``Scheduler.close`` (or closing each worker) sends every worker's message in one turn
of the loop and, for each worker that leaves, ``remove_worker`` goes over every remaining one:
O(W^2) over a shutdown. Measured (benchmarks.scale, docs/scale.md): ~18 s of the loop at
10,000 workers for the removals, a turn of 3.0 s of its CPU to tell 10,000 workers at once;
with these, the scheduler's longest stall at the end 1.17 s. Checked against distributed
2026.7.1 (the range's low end, constraints.txt) and 2026.8.0 (the newest in range:
tests/test_newest_dask.py runs its tests there).
"""

from __future__ import annotations

import asyncio

from distributed import Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin

from . import PER_TURN, log_summary, many_workers

CLOSE_PER_TURN = PER_TURN  # workers told to close per turn of the event loop (see close_workers)


async def close_on_signal(scheduler: Scheduler) -> None:
    """SIGTERM (or SIGINT) to the scheduler's process: a batch system stops the job (``scancel``
    and the walltime signal every process of its steps), so its workers are leaving too.

    Dask's ``Scheduler.close`` closes each worker's connection, and each then goes through
    ``remove_worker``, which goes over every remaining worker: O(W^2) over a shutdown, ~18 s
    at 10,000 workers. The cluster is ending: as in ``close_workers``, those loops are skipped.
    """
    if isinstance(scheduler.workers, many_workers.Workers):
        scheduler.workers.ending = True
    log_summary.mute("tls-refused")
    await scheduler.close(reason="start-cluster-signal")


def close_workers(scheduler: Scheduler) -> asyncio.Task[None]:
    """Close every worker (and its Nanny), keeping the scheduler up, so the rank sees them go.

    The cluster is ending, so the scheduler no longer goes over the remaining workers for each
    one that leaves (``many_workers.Workers``), nor warns about the TLS handshakes that closing
    workers break off (their heartbeat's connection, with Dask's own workers: 161 warnings on
    the terminal at 1,000 workers). They are told ``CLOSE_PER_TURN`` at a time, one batch per
    turn of the event loop: all at once, each worker's message went out in one turn of the
    next (10,000 workers: a turn of 3.0 s of the loop's CPU; ``event_loop``).
    """
    log_summary.mute("tls-refused")
    if isinstance(scheduler.workers, many_workers.Workers):
        scheduler.workers.ending = True
    scheduler.add_plugin(_CloseLateArrivals(), name="dask-hpc-close-late-arrivals")

    async def in_batches() -> None:
        addresses = list(scheduler.workers)
        for first in range(0, len(addresses), CLOSE_PER_TURN):
            for address in addresses[first : first + CLOSE_PER_TURN]:
                scheduler.close_worker(address)
            await asyncio.sleep(0)

    return asyncio.ensure_future(in_batches())


class _CloseLateArrivals(SchedulerPlugin):
    """A worker that registers once the workers are being closed is closed on arrival.

    Its restart was under way (its last task killed it), so the list of workers to close did
    not hold it: without this it stayed, and its rank waited out the leave timeout for it
    (seen: a job that ended right after a crash, ~10 s more).
    """

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        # Its stream is made before plugins hear of it; what is sent goes once it starts.
        scheduler.close_worker(worker)
