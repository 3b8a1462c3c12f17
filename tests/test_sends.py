"""The scheduler's writes to its workers, at most so many a turn of its loop (at_scale.sends):
the gate alone, and a real computation whose streams go through it."""

from __future__ import annotations

import asyncio
import operator
from collections import Counter

import dask
from distributed import Client, Scheduler, Worker

from dask_hpc.at_scale import sends


class Turns:
    """Counts the loop's turns: a callback that puts itself back each turn (asyncio runs the
    callbacks that were ready when a turn began, so it runs exactly once a turn)."""

    def __init__(self) -> None:
        self.now = 0
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_soon(self.tick)

    def tick(self) -> None:
        self.now += 1
        self.handle = self.loop.call_soon(self.tick)

    def stop(self) -> None:
        self.handle.cancel()


class CountingGate(sends.WritesPerTurn):
    """The gate, noting the turn each write it lets through starts in."""

    def __init__(self, limit: int, turns: Turns) -> None:
        super().__init__(limit)
        self.turns = turns
        self.started: list[int] = []

    async def wait(self) -> None:
        await super().wait()
        self.started.append(self.turns.now)


def test_three_hundred_writes_in_one_turn_start_eight_a_turn_in_order() -> None:
    async def run() -> tuple[list[int], list[int]]:
        turns = Turns()
        gate = CountingGate(8, turns)
        order: list[int] = []

        async def write(i: int) -> int:
            order.append(i)
            return i

        gated = gate.gated(write)
        results = await asyncio.gather(*(gated(i) for i in range(300)))
        turns.stop()
        assert results == list(range(300))
        return order, gate.started

    order, started = asyncio.run(run())
    assert order == list(range(300))  # first come, first written
    per_turn = Counter(started)
    assert max(per_turn.values()) == 8, per_turn
    assert len(per_turn) == 300 // 8 + 1  # 37 turns of 8, one of 4


def test_a_computation_on_workers_whose_streams_write_one_a_turn() -> None:
    """Every worker's stream goes through the gate (one write a turn here): 400 tasks handed
    to three workers at once (no queuing) all come back right."""

    async def run() -> tuple[list[int], list[int], int]:
        turns = Turns()
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
            gate = CountingGate(1, turns)
            scheduler.add_plugin(sends._GatedStreams(gate))
            async with Worker(scheduler.address, nthreads=2), \
                    Worker(scheduler.address, nthreads=2), \
                    Worker(scheduler.address, nthreads=2), \
                    Client(scheduler.address, asynchronous=True) as client:
                gated = [getattr(s.comm.write, "__wrapped__", None) is not None
                         for s in scheduler.stream_comms.values()]
                futures = client.map(operator.add, range(400), [1] * 400)
                results = await client.gather(futures)
        turns.stop()
        return results, gate.started, sum(gated)

    with dask.config.set({"distributed.scheduler.worker-saturation": float("inf")}):
        results, started, gated = asyncio.run(run())
    assert results == list(range(1, 401))
    assert gated == 3
    per_turn = Counter(started)
    assert len(started) >= 3 and max(per_turn.values()) == 1, per_turn


def test_install_adds_the_gate_to_a_scheduler_with_no_worker_yet() -> None:
    async def run() -> bool:
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
            gate = sends.install(scheduler)
            return any(getattr(p, "gate", None) is gate for p in scheduler.plugins.values())

    assert asyncio.run(run())
