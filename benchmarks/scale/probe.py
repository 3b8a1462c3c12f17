"""A scheduler preload for the scale benchmark (``lifecycle``): the scheduler thread's CPU while
workers join and leave; and for ``faults``, its event loop's stalls and every removal.

Rank 0's CPU as a whole also holds what grows with the run's wall time (the scheduler's and
rank 0's own worker's periodic callbacks), and on a 2-core machine the simulators stretch the
wall time; the event loop's thread CPU between the first and the last join, and between the
first and the last removal, is the cost of the workers themselves. Loaded with
``DASK_DISTRIBUTED__SCHEDULER__PRELOAD=<this file>``; writes JSON to ``$SCALE_PROBE_OUT``
(and, with ``$SCALE_FAULTS_OUT`` set, the stalls and removals there).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from distributed import Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin

HEARTBEATS: list[float] = []  # when the scheduler handled each worker's heartbeat


def _count_heartbeats() -> None:
    """Note the time of every heartbeat the scheduler handles (``Scheduler.heartbeat_worker``,
    patched on the class when this preload is imported, before the scheduler binds its
    handlers; a worker's registration counts as one too)."""
    handle = Scheduler.heartbeat_worker
    if hasattr(handle, "counted"):  # Dask imports a preload file twice (import, then reload)
        return

    def heartbeat_worker(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        HEARTBEATS.append(time.time())
        return handle(self, *args, **kwargs)

    heartbeat_worker.counted = True  # type: ignore[attr-defined]
    Scheduler.heartbeat_worker = heartbeat_worker  # type: ignore[method-assign]


class JoinsAndLeaves(SchedulerPlugin):
    """Thread CPU and wall time at the first and last join and removal; the loop thread's CPU
    every second (any window's share: ``cpu``); every heartbeat's time."""

    name = "dask-hpc-benchmark-probe"

    def __init__(self) -> None:
        self.marks: dict[str, Any] = {"joins": 0, "leaves": 0, "cpu": []}
        self.sampler: asyncio.Task[None] | None = None

    async def start(self, scheduler: Scheduler) -> None:
        async def sample() -> None:
            while True:
                self.marks["cpu"].append((time.time(), time.thread_time()))
                await asyncio.sleep(1)

        self.sampler = asyncio.ensure_future(sample())

    def _mark(self, event: str) -> None:
        now = (time.thread_time(), time.time())
        self.marks.setdefault(f"first_{event}", now)
        self.marks[f"last_{event}"] = now

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self.marks["joins"] += 1
        self._mark("join")

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        self.marks["leaves"] += 1
        self._mark("leave")

    async def close(self) -> None:
        if self.sampler is not None:
            self.sampler.cancel()
        self.marks["cpu"].append((time.time(), time.thread_time()))
        with open(os.environ["SCALE_PROBE_OUT"], "w") as out:
            json.dump({**self.marks, "heartbeats": HEARTBEATS}, out)


ACCEPTED: list[float] = []  # when the scheduler's listener accepted each connection


def _count_accepts() -> None:
    """Note the time of every connection the process's TCP/TLS listeners accept (patched on
    the class when this preload is imported, before the scheduler starts listening)."""
    from distributed.comm.tcp import BaseTCPListener

    handle = BaseTCPListener._handle_stream
    if hasattr(handle, "counted"):  # Dask imports a preload file twice (import, then reload)
        return

    async def _handle_stream(self, stream, address):  # type: ignore[no-untyped-def]
        ACCEPTED.append(time.time())
        return await handle(self, stream, address)

    _handle_stream.counted = True  # type: ignore[attr-defined]
    BaseTCPListener._handle_stream = _handle_stream  # type: ignore[method-assign]


REMOVALS_CPU: list[tuple[float, float]] = []  # (when, the loop's CPU in remove_worker)


def _time_removals() -> None:
    """Note the thread CPU of each ``Scheduler.remove_worker`` call (which runs to its end
    without yielding when no plugin's hook is a coroutine: all of its work, in one turn)."""
    remove = Scheduler.remove_worker
    if hasattr(remove, "timed"):  # imported twice, as above
        return

    async def remove_worker(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        cpu = time.thread_time()
        try:
            return await remove(self, *args, **kwargs)
        finally:
            REMOVALS_CPU.append((time.time(), time.thread_time() - cpu))

    remove_worker.timed = True  # type: ignore[attr-defined]
    Scheduler.remove_worker = remove_worker  # type: ignore[method-assign]


STALL_TICK = 0.01  # s between the loop watch's callbacks
STALL_KEPT = 0.1  # s: lateness at least this long is kept, with when it ended


class FaultWatch(SchedulerPlugin):
    """The scheduler's event loop's stalls, Dask's own tick warnings, and every removal.

    A callback due every 10 ms notes how late it runs: the loop did nothing else for that long
    (a blocked loop, or one whose process got no CPU). Dask's own ``_measure_tick`` does the
    same every 20 ms (``distributed.admin.tick``) and logs, at INFO, "Event loop was
    unresponsive in Scheduler for X s" when X exceeds ``distributed.admin.tick.limit``; a
    handler here keeps those. A removal is kept with the worker's name and why Dask removed it
    (the ``stimulus_id`` without its time: ``handle-worker-cleanup`` when the worker's
    connection broke, ``check-worker-ttl`` for missed heartbeats, ...). Where a stall's time
    goes: a thread samples the loop's stack every 50 ms while the loop is over 0.25 s late
    (it runs only when the process gets the CPU, so the samples show the loop's own work), and
    the garbage collector's passes are timed (``gc.callbacks``).
    """

    name = "dask-hpc-benchmark-faults"

    def __init__(self, out: str) -> None:
        self.out = out
        self.names: dict[str, str] = {}  # address -> worker name
        # (time, name, why, the loop thread's CPU seconds so far)
        self.removals: list[tuple[float, str, str, float]] = []
        # (time it ended, seconds late, CPU seconds of the loop's thread and of the process)
        self.stalls: list[tuple[float, float, float, float]] = []
        self.dask_ticks: list[tuple[float, float]] = []  # Dask's warnings: (time, seconds)
        self.longest = 0.0
        self.handler = logging.Handler(logging.INFO)
        self.handler.emit = self._dask_tick  # type: ignore[method-assign]
        self.due = 0.0
        self.cpu = (0.0, 0.0)
        self.timer: asyncio.TimerHandle | None = None
        self.stacks: list[tuple[float, str]] = []  # (time, the loop's stack) while late
        # generation -> [passes, seconds, longest, the thread's CPU seconds, longest in CPU]
        self.gc: dict[str, list[float]] = {}
        self._gc_started = (0.0, 0.0)
        self.closed = threading.Event()

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = (time.perf_counter(), time.thread_time())
            return
        took = time.perf_counter() - self._gc_started[0]
        cpu = time.thread_time() - self._gc_started[1]
        n, total, longest, total_cpu, longest_cpu = self.gc.get(str(info["generation"]), [0] * 5)
        self.gc[str(info["generation"])] = [n + 1, total + took, max(longest, took),
                                            total_cpu + cpu, max(longest_cpu, cpu)]  # fmt: skip

    def _sample(self, loop_thread: int) -> None:
        while not self.closed.wait(0.05):
            if time.monotonic() - self.due < 0.25:
                continue
            frame = sys._current_frames().get(loop_thread)
            where = []
            while frame is not None and len(where) < 8:
                code = frame.f_code
                where.append(f"{os.path.basename(code.co_filename)}:{code.co_name}")
                frame = frame.f_back
            self.stacks.append((time.time(), " < ".join(where)))

    def _dask_tick(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Event loop was unresponsive in %s") and record.args:
            owner, seconds = record.args  # type: ignore[misc]
            if owner == "Scheduler":
                self.dask_ticks.append((record.created, float(seconds)))

    def _tick(self) -> None:
        now, cpu = time.monotonic(), (time.thread_time(), time.process_time())
        late = now - self.due
        self.longest = max(self.longest, late)
        if late >= STALL_KEPT:  # with the CPU the loop's thread and its process used meanwhile
            self.stalls.append((time.time(), late, cpu[0] - self.cpu[0], cpu[1] - self.cpu[1]))
        self.due, self.cpu = now + STALL_TICK, cpu
        self.timer = asyncio.get_running_loop().call_at(self.due, self._tick)

    async def start(self, scheduler: Scheduler) -> None:
        logging.getLogger("distributed.core").addHandler(self.handler)
        self.due = asyncio.get_running_loop().time()  # the loop's clock is time.monotonic
        self.cpu = (time.thread_time(), time.process_time())
        self._tick()
        gc.callbacks.append(self._gc)
        loop_thread = threading.get_ident()
        threading.Thread(target=self._sample, args=(loop_thread,), daemon=True).start()

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self.names[worker] = str(scheduler.workers[worker].name)

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        why = str(kwargs.get("stimulus_id", "")).rsplit("-", 1)[0]  # (a regex: 7% of a shutdown)
        self.removals.append((time.time(), self.names.get(worker, worker), why, time.thread_time()))

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.closed.set()
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)
        logging.getLogger("distributed.core").removeHandler(self.handler)
        with open(self.out, "w") as out:
            json.dump({"removals": self.removals, "stalls": self.stalls,
                       "dask_ticks": self.dask_ticks, "longest": self.longest,
                       "stacks": self.stacks, "gc": self.gc, "accepted": ACCEPTED,
                       "removals_cpu": REMOVALS_CPU},
                      out)  # fmt: skip


def dask_setup(scheduler: Scheduler) -> None:
    scheduler.add_plugin(JoinsAndLeaves())
    if os.environ.get("SCALE_FAULTS_OUT"):
        scheduler.add_plugin(FaultWatch(os.environ["SCALE_FAULTS_OUT"]))


_count_heartbeats()
if os.environ.get("SCALE_FAULTS_OUT"):
    _count_accepts()
    _time_removals()
