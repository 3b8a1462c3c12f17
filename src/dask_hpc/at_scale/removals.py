"""Workers removed from a cluster told to the remaining workers together, not one by one.

For each worker removed, Dask's ``Scheduler.remove_worker`` goes over every remaining worker
twice, in the same turn of the loop: to drop the pair's bandwidth estimates and to send each
one ``remove-worker`` message. O(W) per removal: when many leave at once (a lost switch, a
job's ranks killed), O(W^2) in a few turns. Measured (benchmarks.scale.faults, kill of 1,000
of 10,000 workers on 2 cores, docs/scale.md): 21.7 ms of the loop per removal, the last lost
worker removed 27.6 s after the kill; a hung rank's 9,937 workers given up in one turn of
298.8 s. Here those two loops see no worker (``many_workers.Workers``); the workers removed in
one turn are told to the others at the next, each remaining worker sent one batch with Dask's
own message for each worker gone (its ``stimulus_id`` kept), ``PER_TURN`` remaining workers a
turn. Checked against distributed 2026.7.1 (the range's low end, constraints.txt) and 2026.8.0
(the newest in range: tests/test_newest_dask.py runs its tests there).
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import PER_TURN


class ToldTogether:
    """The removed workers the remaining ones have not yet heard of, and the task telling them."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.pending: dict[str, str] = {}  # removed worker -> its removal's stimulus_id
        self._task: asyncio.Task[None] | None = None

    def later(self, address: str, stimulus_id: str) -> None:
        """Tell the others of ``address`` (removed in this turn) at the next turn."""
        self.pending[address] = stimulus_id
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._tell())

    async def told(self) -> None:
        """Return once every removal so far has been told."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _tell(self) -> None:
        while self.pending:
            gone, self.pending = self.pending, {}
            await tell_the_others(self.scheduler, gone)


async def tell_the_others(scheduler: Any, gone: dict[str, str]) -> None:
    """What Dask's ``remove_worker`` does for each remaining worker, once for all of ``gone``
    (removed worker -> stimulus_id): their bandwidth estimates dropped, each remaining worker
    sent one ``remove-worker`` per worker gone in one batch, ``PER_TURN`` workers a turn.

    A worker back at the same address since (a reconnect) is not told of: it is no longer gone.
    """
    workers = scheduler.workers
    gone = {address: sid for address, sid in gone.items() if address not in workers}
    if not gone:
        return
    bandwidth = scheduler.bandwidth_workers
    for pair in [pair for pair in bandwidth if pair[0] in gone or pair[1] in gone]:
        del bandwidth[pair]
    messages = [
        {"op": "remove-worker", "worker": address, "stimulus_id": sid}
        for address, sid in gone.items()
    ]
    remaining = list(workers)
    for first in range(0, len(remaining), PER_TURN):
        if getattr(workers, "ending", False):  # the cluster ends: every worker is closing
            return
        batch = remaining[first : first + PER_TURN]
        # Dask's own way of sending several messages to each of several workers (a worker
        # whose stream has closed is removed, as worker_send does)
        scheduler.send_all({}, {w: messages for w in batch if w in workers})
        await asyncio.sleep(0)  # a turn of the loop between batches (a yield, not a wait)
