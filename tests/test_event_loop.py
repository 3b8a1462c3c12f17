"""The scheduler's event loop takes at most EVENTS_PER_TURN ready connections a turn, and
every ready one in its turn; every loop of ours ends quietly (dask_hpc.at_scale.event_loop)."""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import socket

import pytest

from dask_hpc.at_scale import event_loop

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

    assert event_loop.run(main(), few_events_per_turn=True) is event_loop.FewEventsPerTurn


@pytest.mark.parametrize("few_events_per_turn", [False, True])
def test_a_signal_while_the_loop_closes_writes_to_no_closed_pipe(
    few_events_per_turn: bool, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """asyncio's close() closes the loop's self-pipe before it removes the signal handlers; a
    SIGTERM in between (the rank stopping its children) made Python print "Exception ignored
    when trying to write to the signal wakeup fd" with a traceback. Here the signal comes
    exactly then."""
    close_pipe = asyncio.selector_events.BaseSelectorEventLoop._close_self_pipe

    def close_then_signal(loop: asyncio.AbstractEventLoop) -> None:
        close_pipe(loop)
        os.kill(os.getpid(), signal.SIGUSR2)

    monkeypatch.setattr(
        asyncio.selector_events.BaseSelectorEventLoop, "_close_self_pipe", close_then_signal
    )
    seen: list[int] = []

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, seen.append, 1)

    event_loop.run(main(), few_events_per_turn=few_events_per_turn)
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL  # the loop removed its handler
    err = capfd.readouterr().err
    assert "wakeup fd" not in err and "Traceback" not in err, err
