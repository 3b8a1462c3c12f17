"""Work stealing's thief picked in O(log W) (at_scale.stealing): the same worker as Dask's
``WorkStealing._get_thief`` over many random states, and steals in a real computation."""

from __future__ import annotations

import asyncio
import random
import time

import dask
from distributed import Client, Scheduler, Worker, wait
from distributed.core import Status
from distributed.scheduler import TaskGroup, TaskPrefix, TaskState, WorkerState
from distributed.stealing import WorkStealing

from dask_hpc.at_scale import stealing


def workers(scheduler: Scheduler, rng: random.Random, n: int) -> list[WorkerState]:
    return [
        WorkerState(address=f"tcp://127.0.0.1:{10000 + i}", status=Status.running, pid=i,
                    name=i, nthreads=rng.choice([1, 1, 2, 4]), memory_limit=0,
                    local_directory="/nonexistent", nanny=None, server_id=str(i),
                    scheduler=scheduler)
        for i in range(n)
    ]


def tasks(scheduler: Scheduler, rng: random.Random, pool: list[WorkerState], n: int):
    """Stealable tasks, each with 0-3 inputs held by 1-3 workers (some with no bytes)."""
    group = TaskGroup("t", TaskPrefix("t"))
    out = []
    for i in range(n):
        ts = TaskState(f"t-{i}", None, "processing", group, validate=False)
        for j in range(rng.randrange(4)):
            dts = TaskState(f"d-{i}-{j}", None, "memory", group, validate=False)
            dts.set_nbytes(rng.choice([0, 8, 10_000, 50_000_000]))
            for ws in rng.sample(pool, rng.randrange(1, 4)):
                scheduler.add_replica(dts, ws)
            ts.add_dependency(dts)
        out.append(ts)
    return out


def occupancy(rng: random.Random) -> float:
    """Often equal (idle workers: 0), else any: ties and orders both."""
    return rng.choice([0.0, 0.0, 0.5, 1.0, rng.random() * 10])


def test_the_thief_is_the_one_dask_picks_over_many_random_turns() -> None:
    async def run() -> int:
        compared = 0
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
            dasks = scheduler.extensions["stealing"]
            assert isinstance(dasks, WorkStealing)
            ours = stealing.Stealing(dasks)
            for seed in range(40):
                rng = random.Random(seed)
                pool = workers(scheduler, rng, rng.choice([5, 50, 400]))
                todo = tasks(scheduler, rng, pool, 60)
                for _ in range(3):  # turns: a new set of thieves, new occupancies
                    occupancies = {ws: occupancy(rng) for ws in pool}
                    thieves = set(rng.sample(pool, max(1, len(pool) // 2)))
                    dasks.in_flight_occupancy.clear()
                    for ts in rng.sample(todo, 30):
                        if not thieves:
                            break
                        expected = WorkStealing._get_thief(
                            dasks, scheduler, ts, thieves, occupancies=occupancies)
                        got = ours.get_thief(scheduler, ts, thieves, occupancies=occupancies)
                        assert got is expected, (seed, ts.key)
                        compared += 1
                        dasks.in_flight_occupancy[expected] += rng.choice([0.0, 0.25, 3.0])
                        if rng.random() < 0.3:  # as balance does once a thief is busy
                            thieves.discard(expected)
        return compared

    assert asyncio.run(run()) > 2000  # every one the same


def one() -> int:
    return 1


def slow_add(value: int, i: int) -> int:
    time.sleep(0.2)
    return value + i


def test_a_real_computation_steals_through_it() -> None:
    """Twenty 0.2 s tasks all given to the one worker there is; a second joins and steals."""

    async def run() -> tuple[int, int, int, list[int]]:
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
            ours = stealing.install(scheduler)
            assert ours is not None
            calls = []

            def counting(*args, **kwargs):
                calls.append(1)
                return ours.get_thief(*args, **kwargs)

            scheduler.extensions["stealing"]._get_thief = counting
            async with Worker(scheduler.address, nthreads=1), \
                    Client(scheduler.address, asynchronous=True) as client:
                x = client.submit(one)
                futures = [client.submit(slow_add, x, i) for i in range(20)]
                await wait(futures, return_when="FIRST_COMPLETED")  # a duration known
                async with Worker(scheduler.address, nthreads=1) as b:
                    results = await client.gather(futures)
                    on_b = sum(1 for key in b.data if key != x.key)
            counts = scheduler.extensions["stealing"].metrics["request_count_total"]
            return sum(counts.values()), len(calls), on_b, results

    # Without queuing, Dask gives all twenty to the worker there is (with it, they would wait
    # in the scheduler's queue and the second worker take them without a steal).
    with dask.config.set({"distributed.scheduler.worker-saturation": float("inf")}):
        stolen, calls, on_b, results = asyncio.run(run())
    assert results == [1 + i for i in range(20)]
    assert stolen > 0 and calls > 0 and on_b > 0, (stolen, calls, on_b)


def test_install_leaves_a_scheduler_without_work_stealing_alone() -> None:
    async def run() -> object:
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0",
                             extensions={}) as scheduler:
            return stealing.install(scheduler)

    assert asyncio.run(run()) is None
