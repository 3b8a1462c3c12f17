"""Heartbeats on the worker's stream (dask_hpc.at_scale.heartbeats): a real scheduler and
workers."""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import Callable

import pytest
from distributed import Scheduler, Worker

from dask_hpc.at_scale import heartbeats
from dask_hpc.running.worker import HpcWorker


def no_rpc_heartbeats(scheduler: Scheduler) -> list[str]:
    """Fail the test's heartbeat RPCs loudly; returns the workers that tried one."""
    tried: list[str] = []

    def refuse(**kwargs) -> dict:
        tried.append(kwargs.get("address", "?"))
        raise AssertionError("a heartbeat came by RPC")

    scheduler.handlers["heartbeat_worker"] = refuse
    return tried


async def until(condition, timeout: float = 30) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


def test_heartbeats_travel_on_the_stream_and_open_no_second_connection() -> None:
    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            heartbeats.serve(scheduler)
            tried = no_rpc_heartbeats(scheduler)
            async with HpcWorker(scheduler.address, nthreads=1, host="127.0.0.1") as worker:
                ws = scheduler.workers[worker.address]
                seen = ws.last_seen
                for _ in range(3):  # Dask's own Worker.heartbeat, as its periodic callback runs
                    await asyncio.wait_for(worker.heartbeat(), 30)
                assert ws.last_seen > seen and worker.status.name == "running"
                assert worker.periodic_callbacks["heartbeat"].callback_time == 500  # its reply
                assert tried == []
                assert worker.rpc.open == 0  # no pooled connection to the scheduler

    asyncio.run(asyncio.wait_for(run(), 60))


def test_dasks_own_worker_still_heartbeats_by_rpc_to_such_a_scheduler() -> None:
    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            heartbeats.serve(scheduler)
            async with Worker(scheduler.address, nthreads=1, host="127.0.0.1") as worker:
                seen = scheduler.workers[worker.address].last_seen
                await asyncio.wait_for(worker.heartbeat(), 30)
                assert scheduler.workers[worker.address].last_seen > seen
                assert worker.rpc.open == 1  # Dask's pooled heartbeat connection

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_scheduler_that_does_not_offer_gets_rpc_heartbeats(monkeypatch) -> None:
    monkeypatch.setattr(heartbeats.StreamHeartbeats, "offer_wait", 0.2)

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            async with HpcWorker(scheduler.address, nthreads=1, host="127.0.0.1") as worker:
                seen = scheduler.workers[worker.address].last_seen
                await asyncio.wait_for(worker.heartbeat(), 30)
                assert scheduler.workers[worker.address].last_seen > seen
                assert worker.rpc.open == 1

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_heartbeat_waiting_on_the_stream_when_its_worker_closes_is_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            heartbeats.serve(scheduler)
            arrived = asyncio.Event()
            scheduler.stream_handlers[heartbeats.BEAT] = lambda **kwargs: arrived.set()  # mute
            worker = await HpcWorker(scheduler.address, nthreads=1, host="127.0.0.1")
            await until(lambda: worker.scheduler._offered.is_set())
            beat = asyncio.ensure_future(worker.heartbeat())
            await asyncio.wait_for(arrived.wait(), 30)
            await asyncio.wait_for(worker.close(), 30)
            await asyncio.wait_for(beat, 30)

    with caplog.at_level(logging.WARNING, logger="distributed.worker"):
        asyncio.run(asyncio.wait_for(run(), 60))
    assert not [r for r in caplog.records if "heartbeat" in r.getMessage()]


def one_heartbeat(on_beat: Callable[[Callable[..., None]], Callable[..., None]]) -> list[str]:
    """One heartbeat of a running worker to a scheduler whose beat handler is
    ``on_beat(its own handler)``; what ``distributed.worker`` logged at WARNING and above.
    The worker must still be running after it."""

    async def run() -> list[str]:
        shown: list[str] = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda record: shown.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("distributed.worker").addHandler(handler)
        try:
            async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
                heartbeats.serve(scheduler)
                handlers = scheduler.stream_handlers
                handlers[heartbeats.BEAT] = on_beat(handlers[heartbeats.BEAT])
                async with HpcWorker(scheduler.address, nthreads=1, host="127.0.0.1") as worker:
                    await until(lambda: worker.scheduler._offered.is_set())
                    await asyncio.wait_for(worker.heartbeat(), 30)
                    assert worker.status.name == "running"
        finally:
            logging.getLogger("distributed.worker").removeHandler(handler)
        return shown

    return asyncio.run(asyncio.wait_for(run(), 60))


def test_a_missing_reply_is_a_failed_heartbeat(monkeypatch) -> None:
    """A reply that never comes fails like a broken RPC: Dask logs it and the worker runs on."""
    monkeypatch.setattr(heartbeats.StreamHeartbeats, "reply_timeout", 0.3)
    never_answer = lambda answer: lambda **kwargs: None  # noqa: E731
    assert one_heartbeat(never_answer) == ["Failed to communicate with scheduler during heartbeat."]


def test_a_reply_due_while_the_worker_did_not_run_is_waited_for_not_a_failure(
    monkeypatch,
) -> None:
    """The process stops for longer than the reply's timeout (SIGSTOP, a hung node, the GIL
    held): when it runs again the timeout has long passed, but the reply was never given a
    chance. It gets the timeout again; no error is logged."""
    monkeypatch.setattr(heartbeats.StreamHeartbeats, "reply_timeout", 1.0)
    stalled: list[float] = []

    def stall_then_answer(answer: Callable[..., None]) -> Callable[..., None]:
        def beat(**kwargs) -> None:
            if not stalled:  # the whole process stops 3 s, as under SIGSTOP
                stalled.append(3.0)
                time.sleep(3.0)
            answer(**kwargs)

        return beat

    assert one_heartbeat(stall_then_answer) == []
    assert stalled


class _Stream:
    """A worker's batched stream to a scheduler that answers each beat ``after`` seconds late."""

    def __init__(self, beats: heartbeats.StreamHeartbeats, after: float) -> None:
        self.beats, self.after = beats, after

    def send(self, msg: dict) -> None:
        if msg.get("op") == heartbeats.BEAT:
            loop = asyncio.get_running_loop()
            loop.call_later(self.after, self.beats._on_reply, {"status": "OK"})


def test_a_stall_that_ends_just_before_the_deadline_is_waited_for_too(monkeypatch) -> None:
    """The process stops for most of the reply's timeout and runs again just before it (the
    timer then fires on time, not late: a CI run, with hpc.hung-timeout and this timeout both
    30 s), and the reply comes after the deadline: the stall was seen while the heartbeat
    waited, so it gets the timeout again and takes the reply. Without a stall, a reply that
    late is a failed heartbeat."""
    monkeypatch.setattr(heartbeats.StreamHeartbeats, "reply_timeout", 4.0)

    async def beat(stall: float) -> dict:
        worker = types.SimpleNamespace(scheduler=None, stream_handlers={}, rpc=None)
        beats = heartbeats.StreamHeartbeats(worker)
        beats._offered.set()
        worker.batched_stream = _Stream(beats, after=5.0)
        if stall:  # the whole process stopped 3.5 s of the 4, as under SIGSTOP
            asyncio.get_running_loop().call_later(0.1, time.sleep, stall)
        return await beats.heartbeat_worker()

    assert asyncio.run(asyncio.wait_for(beat(3.5), 30)) == {"status": "OK"}
    with pytest.raises(OSError, match="no heartbeat reply from the scheduler within 4.0 s"):
        asyncio.run(asyncio.wait_for(beat(0), 30))


def test_an_offer_that_comes_late_moves_the_heartbeats_to_the_stream(monkeypatch) -> None:
    """A busy scheduler's offer after the first heartbeat went by RPC: the next ones go on the
    stream, and the RPC's pooled connection is closed (one open file per worker again)."""
    monkeypatch.setattr(heartbeats.StreamHeartbeats, "offer_wait", 0.2)

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            heartbeats.serve(scheduler)
            offer = scheduler.stream_handlers["keep-alive"]
            scheduler.stream_handlers["keep-alive"] = lambda **kwargs: None  # not yet
            async with HpcWorker(scheduler.address, nthreads=1, host="127.0.0.1") as worker:
                await asyncio.wait_for(worker.heartbeat(), 30)
                assert worker.rpc.open == 1  # Dask's RPC, on a pooled connection
                offer(worker=worker.address, **{heartbeats.ASK: True})  # the late answer
                await until(lambda: worker.scheduler._offered.is_set())
                tried = no_rpc_heartbeats(scheduler)
                await asyncio.wait_for(worker.heartbeat(), 30)
                await until(lambda: worker.rpc.open == 0)
                assert tried == []

    asyncio.run(asyncio.wait_for(run(), 60))
