"""The scheduler's writes to its workers: at most ``WRITES_PER_TURN`` start in one turn of its
event loop; the others wait, in order, for the next turns.

Dask gives each worker a batched stream (``BatchedSend``): a message for a worker wakes that
stream's coroutine, which serializes what has gathered and writes it to the worker's
connection (with TLS: encrypted, then sent). asyncio runs every coroutine woken in one turn in
the next turn, before its timers and the other connections. When a graph's tasks go to every
worker at once (``worker-saturation: inf``: every one of 100,000 root tasks is handed out as
the graph arrives), all 10,000 streams write in one turn: measured with benchmarks.scale,
one turn of 12.58 s (10.32 s of the loop's CPU, ~1 ms per write at load 44). Here each
stream's connection waits its turn before it writes: the same messages, in the same order per
worker, in more, shorter turns, with timers, heartbeats and clients in between. A stream
whose write waits gathers the messages that come meanwhile and sends them in one write, as
Dask does while a write is under way. Measured (benchmarks.scale, 10,000 workers, 22,223 tasks
under queuing, A/B the same afternoon, docs/scale.md): longest turn 6.26 -> 3.41 s, TLS writes
no longer in it; the result 519.6 -> 365.1 s.

Installed by start-cluster's scheduler (``install``); Dask's own classes are not changed:
each worker's stream gets the gate on its connection's ``write`` as the worker joins.
Checked against distributed 2026.7.1 (the range's low end, constraints.txt) and 2026.8.0
(the newest in range: tests/test_newest_dask.py runs its tests there).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from distributed import Scheduler
from distributed.batched import BatchedSend
from distributed.diagnostics.plugin import SchedulerPlugin

from . import PER_TURN

WRITES_PER_TURN = PER_TURN  # a write costs ~1 ms of the loop's CPU at 10,000 workers (above)


class WritesPerTurn:
    """A gate that lets at most ``limit`` writes start in one turn of the running loop."""

    def __init__(self, limit: int = WRITES_PER_TURN) -> None:
        self.limit = limit
        self.waiting: deque[asyncio.Future[None]] = deque()
        self._new_turn_due = False

    async def wait(self) -> None:
        """Return when this write may start: in a later turn, after those that waited first
        (two turns on: microseconds on an idle loop)."""
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        if not self._new_turn_due:
            self._new_turn_due = True
            asyncio.get_running_loop().call_soon(self._new_turn)
        await future

    def _new_turn(self) -> None:
        """Let the next ``limit`` waiting writes go: they start in the loop's next turn
        (their futures' callbacks), this again in that turn while any is left."""
        self._new_turn_due = False
        released = 0
        while self.waiting and released < self.limit:
            future = self.waiting.popleft()
            if not future.done():  # its write was cancelled meanwhile
                future.set_result(None)
                released += 1
        if self.waiting:
            self._new_turn_due = True
            asyncio.get_running_loop().call_soon(self._new_turn)

    def gated(self, write: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """``write`` (a connection's), each call waiting its turn first."""

        @functools.wraps(write)
        async def gated_write(*args: Any, **kwargs: Any) -> Any:
            await self.wait()
            return await write(*args, **kwargs)

        return gated_write


class _GatedStreams(SchedulerPlugin):
    """Puts the gate on each joining worker's stream: its connection's ``write``, as Dask's
    ``handle_worker`` starts the stream (after the scheduler's ``add_worker`` hooks)."""

    name = "dask-hpc-writes-per-turn"

    def __init__(self, gate: WritesPerTurn) -> None:
        self.gate = gate

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        stream = scheduler.stream_comms.get(worker)
        if stream is not None:
            stream.start = functools.partial(self._start, stream)  # this stream only

    def _start(self, stream: BatchedSend, comm: Any) -> None:
        comm.write = self.gate.gated(comm.write)
        BatchedSend.start(stream, comm)


def install(scheduler: Scheduler, limit: int = WRITES_PER_TURN) -> WritesPerTurn:
    """Gate the writes to the workers of a scheduler not yet started (no worker yet)."""
    assert not scheduler.workers, "before any worker joins"
    gate = WritesPerTurn(limit)
    scheduler.add_plugin(_GatedStreams(gate))
    return gate
