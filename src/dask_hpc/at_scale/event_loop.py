"""Our processes' event loops; the scheduler's takes at most ``EVENTS_PER_TURN`` ready
connections per turn.

asyncio's loop asks epoll for every ready file descriptor at once, then runs all of their
callbacks before it looks at anything else: its timers, its other work, and Dask's own
measure of it (``distributed.admin.tick``). When thousands of workers connect at once, every
connection with a TLS hello waiting is ready together, and one turn does thousands of
handshakes: measured with benchmarks.scale at 10,000 workers, one turn of 10.7 s of the
scheduler loop's CPU (at 1,000 workers 0.8-1.5 s), the "event-loop stalls of 6 s" of
distributed#3691. Asking epoll for at most ``EVENTS_PER_TURN`` of them per turn bounds a
turn to what those cost (a TLS handshake step is ~1 ms of CPU, a worker's registration ~2 ms):
the others stay ready and are handed out in the next turns, in turn (epoll puts a reported
level-triggered descriptor at the back of its ready list). The same work is done, in more,
shorter turns, with timers and other messages in between.

Measured (docs/scale.md, with the frozen objects of ``many_workers``): the scheduler's longest
stall at the start of 10,000 workers 8.9 -> 0.83 s, at their end 13.5 -> 3.9 s. Checked against
distributed 2026.7.1 (the range's low end, constraints.txt) and 2026.8.0 (the newest in range:
tests/test_newest_dask.py runs its tests there).
"""

from __future__ import annotations

import asyncio
import math
import select
import selectors
import signal
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from . import PER_TURN

EVENTS_PER_TURN = PER_TURN
T = TypeVar("T")


class FewEventsPerTurn(getattr(selectors, "EpollSelector", selectors.DefaultSelector)):
    """An epoll selector that returns at most ``EVENTS_PER_TURN`` ready descriptors a call
    (used only where epoll exists)."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            timeout = -1
        elif timeout <= 0:
            timeout = 0
        else:  # epoll_wait's resolution is 1 ms: wait at least ``timeout``
            timeout = math.ceil(timeout * 1e3) * 1e-3
        try:
            fd_events = self._selector.poll(timeout, EVENTS_PER_TURN)
        except InterruptedError:
            return []
        ready = []
        for fd, event in fd_events:
            key = self._key_from_fd(fd)
            if key:
                events = (selectors.EVENT_WRITE if event & ~select.EPOLLIN else 0) | (
                    selectors.EVENT_READ if event & ~select.EPOLLOUT else 0
                )
                ready.append((key, events & key.events))
        return ready


async def _signals_quiet_at_the_end(main: Coroutine[Any, Any, T]) -> T:
    try:
        return await main
    finally:
        # asyncio's loop.close() closes its self-pipe before it removes its signal handlers: a
        # SIGTERM in between (the rank stopping its children) made Python print "Exception
        # ignored when trying to write to the signal wakeup fd ... Bad file descriptor" and a
        # traceback (seen once in CI). Signals still reach their handlers, which do nothing.
        signal.set_wakeup_fd(-1)


def run(main: Coroutine[Any, Any, T], *, few_events_per_turn: bool = False) -> T:
    """``asyncio.run(main)``, the loop's signal handlers quiet once ``main`` is done;
    ``few_events_per_turn``: on a loop with ``FewEventsPerTurn`` (Linux, Python 3.11+; else
    asyncio's own loop)."""
    quiet = _signals_quiet_at_the_end(main)
    if not few_events_per_turn or not hasattr(select, "epoll") or sys.version_info < (3, 11):
        return asyncio.run(quiet)
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(FewEventsPerTurn())) as r:
        return r.run(quiet)
