"""The scheduler's event loop takes at most EVENTS_PER_TURN ready connections a turn, and
every ready one in its turn (dask_hpc.event_loop)."""

from __future__ import annotations

import asyncio
import selectors
import socket

import pytest

from dask_hpc import event_loop

pytestmark = pytest.mark.skipif(not hasattr(selectors, "EpollSelector"), reason="Linux only")


def test_a_turn_sees_a_bounded_number_of_ready_connections_and_each_gets_its_turn() -> None:
    pairs = [socket.socketpair() for _ in range(200)]
    selector = event_loop.FewEventsPerTurn()
    try:
        for mine, theirs in pairs:
            theirs.send(b"x")  # all 200 readable at once
            selector.register(mine, selectors.EVENT_READ)
        seen: set[int] = set()
        turns = 0
        while len(seen) < len(pairs):
            ready = selector.select(0)
            assert 0 < len(ready) <= event_loop.EVENTS_PER_TURN
            seen |= {key.fileobj.fileno() for key, _ in ready}  # still readable: not drained
            turns += 1
        assert turns == -(-len(pairs) // event_loop.EVENTS_PER_TURN)  # round robin, no repeats
    finally:
        selector.close()
        for mine, theirs in pairs:
            mine.close()
            theirs.close()


def test_run_runs_a_coroutine_on_such_a_loop() -> None:
    async def main() -> type:
        return type(asyncio.get_running_loop()._selector)  # type: ignore[attr-defined]

    assert event_loop.run(main()) is event_loop.FewEventsPerTurn
