"""Workers' heartbeats over the connection each worker already holds to the scheduler.

Dask's worker sends a heartbeat (every ``W/200 + 1`` s) as an RPC on a connection of its own,
kept open in its pool: a second TLS handshake per worker at the scheduler a second after it
registered, and a second open file per worker there for as long as it runs. At 10,000 workers
the scheduler's process needs 20,000 open files (this project's machines allow 20,000 at
most: ``ulimit -Hn``, and many sites 4,096-65,536) and its event loop does 10,000 more TLS
handshakes, ~2 ms each, while workers still join (benchmarks.scale, docs/scale.md; the
lost heartbeats of distributed#3691 at 5,500 workers). Here the same heartbeat travels on the
worker's batched stream (the connection the scheduler sends it tasks on) and its reply comes
back the same way: one connection per worker.

Only Dask's transport changes, through its extension points: the scheduler gets two stream
handlers (``serve``: its own ``heartbeat_worker`` answers, as for the RPC); start-cluster's
worker asks the scheduler on registration whether it takes heartbeats this way, and if so its
``scheduler`` RPC object sends ``heartbeat_worker`` on the stream (``StreamHeartbeats``), so
Dask's own ``Worker.heartbeat`` builds the heartbeat and reads the reply as always. A scheduler
that does not answer (not start-cluster's) gets Dask's RPC heartbeats.

Measured (docs/scale.md): one open file per worker in rank 0 (20,040 at 10,000 workers, not
~30,000), no second handshake per worker. Checked against distributed 2026.7.1 (the range's low
end, constraints.txt) and 2026.8.0 (the newest in range: tests/test_newest_dask.py runs its
tests there).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import dask.config
from dask.utils import parse_timedelta

ASK = "dask-hpc-heartbeats"  # worker -> scheduler, in a keep-alive message: may I?
OFFER = "dask-hpc-heartbeats-offered"  # scheduler -> worker: yes
BEAT = "dask-hpc-heartbeat"  # worker -> scheduler: Dask's heartbeat_worker arguments
REPLY = "dask-hpc-heartbeat-reply"  # scheduler -> worker: its answer
STALLED = 1.0  # s a wait's timer fired late by: this process was not running
LOOK_EVERY = 1.0  # s: how often a heartbeat waiting for its reply looks for such a stall


def serve(scheduler: Any) -> None:
    """Have ``scheduler`` take heartbeats on its workers' streams (as well as by RPC)."""
    keep_alive = scheduler.stream_handlers["keep-alive"]

    def on_keep_alive(*args: Any, worker: str | None = None, **kwargs: Any) -> Any:
        if kwargs.get(ASK) and worker in scheduler.stream_comms:
            scheduler.worker_send(worker, {"op": OFFER})
        return keep_alive(*args, worker=worker, **kwargs)

    def on_beat(worker: str, **kwargs: Any) -> None:
        reply = scheduler.heartbeat_worker(**kwargs)
        if worker in scheduler.stream_comms:  # else it is being removed: its stream closes
            scheduler.worker_send(worker, {"op": REPLY, "reply": reply})

    scheduler.stream_handlers["keep-alive"] = on_keep_alive
    scheduler.stream_handlers[BEAT] = on_beat


class StreamHeartbeats:
    """A worker's ``scheduler`` RPC object whose ``heartbeat_worker`` goes on the stream once
    the scheduler offered it; every other call is the RPC's."""

    # s a heartbeat waits for the scheduler's answer to the worker's question: it follows the
    # registration's reply at once, but 1,000 workers joining at once on 2 busy cores had the
    # scheduler's loop seconds behind (with 5 s, 246 of 1,000 heartbeated by RPC at first).
    offer_wait = 30.0
    reply_timeout: float | None = None  # s; None: Dask's distributed.comm.timeouts.tcp

    def __init__(self, worker: Any) -> None:
        self._worker = worker
        self._rpc = worker.scheduler
        self._offered = asyncio.Event()
        self._asked_at: float | None = None
        self._by_rpc = False  # its last heartbeat went by RPC (on a pooled connection)
        self._replies: collections.deque[asyncio.Future[dict]] = collections.deque()
        worker.stream_handlers[OFFER] = self._on_offer
        worker.stream_handlers[REPLY] = self._on_reply

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rpc, name)

    def ask(self) -> None:
        """Ask on the stream (just registered) whether the scheduler takes heartbeats there."""
        self._asked_at = asyncio.get_running_loop().time()
        self._worker.batched_stream.send({"op": "keep-alive", ASK: True})

    async def heartbeat_worker(self, **kwargs: Any) -> dict:
        if not self._offered.is_set() and self._asked_at is not None:
            waited = asyncio.get_running_loop().time() - self._asked_at
            try:  # the answer is on its way right behind the registration's reply
                await asyncio.wait_for(self._offered.wait(), max(0.0, self.offer_wait - waited))
            except (asyncio.TimeoutError, TimeoutError):
                self._asked_at = None  # not start-cluster's scheduler: Dask's RPC from now on
        if not self._offered.is_set():
            self._by_rpc = True
            return await self._rpc.heartbeat_worker(**kwargs)
        if self._by_rpc:  # the offer came late: the RPC's connection is no longer needed
            self._by_rpc = False
            pool, address = self._worker.rpc, self._rpc.address
            if not pool.occupied.get(address):  # none in use (who_has, ...): close them
                pool.remove(address)
        reply: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        self._replies.append(reply)
        self._worker.batched_stream.send({"op": BEAT, **kwargs})
        timeout = self.reply_timeout or parse_timedelta(
            dask.config.get("distributed.comm.timeouts.tcp"), "s"
        )
        loop = asyncio.get_running_loop()
        deadline, stalled, extended = loop.time() + timeout, False, False
        while not reply.done():  # (a late reply still pairs with it)
            now = loop.time()
            if now >= deadline:
                if not stalled or extended:
                    raise OSError(f"no heartbeat reply from the scheduler within {timeout} s")
                # This process did not run for part of the wait (stopped, its node hung, the
                # GIL held): the reply may be waiting unread. The scheduler gets the timeout
                # again, from now (a rank that rank 0 gave up and that ran again stops its
                # workers meanwhile: tests/test_hung.py saw this error's traceback first). In
                # steps, so that a stall which ends just before the deadline counts too (the
                # timer then fires on time: a CI run, with hpc.hung-timeout and this timeout
                # both 30 s).
                deadline, extended = now + timeout, True
                continue
            step = min(LOOK_EVERY, deadline - now)
            await asyncio.wait({reply}, timeout=step)
            stalled = stalled or loop.time() - now - step > STALLED
        return reply.result()

    def _on_offer(self) -> None:
        self._offered.set()

    def _on_reply(self, reply: dict) -> None:
        if self._replies:  # in order, one stream each way (a late one: its timed-out beat's)
            waiting = self._replies.popleft()
            if not waiting.done():
                waiting.set_result(reply)

    def cut_short(self) -> None:
        """The worker closes: a heartbeat still waiting fails as a broken RPC would."""
        while self._replies:
            waiting = self._replies.popleft()
            if not waiting.done():
                waiting.set_exception(OSError("the worker closed"))
                waiting.exception()  # said to whoever awaits it; nobody else needs to know
