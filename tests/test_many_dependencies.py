"""A task with many dependencies placed in one pass over them (at_scale.dependencies): the same
objective for every worker and the same pick as Dask's over many random states, and a real
computation placed through it."""

from __future__ import annotations

import asyncio
import random
from functools import partial

from distributed import Client, Scheduler, Worker
from distributed.core import Status
from distributed.scheduler import (
    SchedulerState,
    TaskGroup,
    TaskPrefix,
    TaskState,
    WorkerState,
    decide_worker,
)

from dask_hpc.at_scale import dependencies


def workers(scheduler: Scheduler, rng: random.Random, n: int) -> list[WorkerState]:
    pool = [
        WorkerState(address=f"tcp://127.0.0.1:{10000 + i}", status=Status.running, pid=i,
                    name=i, nthreads=rng.choice([1, 1, 2, 4]), memory_limit=0,
                    local_directory="/nonexistent", nanny=None, server_id=str(i),
                    scheduler=scheduler)
        for i in range(n)
    ]  # fmt: skip
    for ws in pool:  # often equal (idle: 0, Dask then computes it: 0 too), else any
        ws._occupancy_cache = rng.choice([0.0, 0.0, 0.5, rng.random() * 10])
    return pool


def task(scheduler: Scheduler, rng: random.Random, pool: list[WorkerState], i: int) -> TaskState:
    """A task with 1-400 dependencies, each held by 1-3 workers; some sizes unknown (Dask's
    default then), some zero, some an actor's."""
    group = TaskGroup("t", TaskPrefix("t"))
    ts = TaskState(f"t-{i}", None, "waiting", group, validate=False)
    ts.actor = rng.random() < 0.1
    for j in range(rng.choice([1, 2, 30, 400])):
        dts = TaskState(f"d-{i}-{j}", None, "memory", group, validate=False)
        if rng.random() < 0.8:  # else unknown: -1
            dts.set_nbytes(rng.choice([0, 8, 10_000, 50_000_000]))
        for ws in rng.sample(pool, min(len(pool), rng.randrange(1, 4))):
            scheduler.add_replica(dts, ws)
        ts.add_dependency(dts)
    return ts


def test_every_objective_and_the_pick_are_dasks_over_many_random_tasks() -> None:
    async def run() -> int:
        compared = 0
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
            placement = dependencies.install(scheduler)
            for seed in range(60):
                rng = random.Random(seed)
                pool = workers(scheduler, rng, rng.choice([2, 20, 300]))
                scheduler.running = set(pool)
                ts = task(scheduler, rng, pool, seed)
                daskss = partial(SchedulerState.worker_objective, scheduler, ts)
                expected = decide_worker(ts, set(pool), None, daskss)
                assert scheduler.decide_worker_non_rootish(ts) is expected, seed
                placement.ts, placement.held = ts, None  # as while it places ts
                for ws in pool:
                    assert scheduler.worker_objective(ts, ws) == daskss(ws), (seed, ws.name)
                    compared += 1
                placement.ts = None
            scheduler.running = set()
        return compared

    assert asyncio.run(run()) > 3000  # every one the same


def square(i: int) -> int:
    return i * i


def test_a_real_computation_places_its_many_dependency_task_through_it() -> None:
    """300 results on three workers, then one task that sums them all: placed through the one
    pass (held_bytes counted), the sum right."""

    async def run() -> tuple[int, int, int]:
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
            dependencies.install(scheduler)
            passes = []
            real = dependencies.held_bytes

            def counting(ts):  # type: ignore[no-untyped-def]
                passes.append(len(ts.dependencies))
                return real(ts)

            dependencies.held_bytes = counting  # type: ignore[assignment]
            try:
                async with Worker(scheduler.address, nthreads=1), \
                        Worker(scheduler.address, nthreads=1), \
                        Worker(scheduler.address, nthreads=1), \
                        Client(scheduler.address, asynchronous=True) as client:
                    # All three running at the scheduler before the first task: a worker
                    # registers as "init" and says it runs in a later message, getting no task
                    # until then. Tasks all on one worker fail both asserts below at once (no
                    # comparison, no pass), as one run on the newest Dask did; that this race
                    # was why is likely, not shown (not seen in 40 runs since).
                    await client.wait_for_workers(3)
                    squares = client.map(square, range(300))
                    total = await client.submit(sum, squares)
                    holders = len({w for f in squares for w in scheduler.tasks[f.key].who_has})
            finally:
                dependencies.held_bytes = real
            return total, max(passes, default=0), holders

    total, most, holders = asyncio.run(run())
    assert total == sum(i * i for i in range(300))
    assert holders > 1  # several candidates, so Dask compared them (through the one pass)
    assert most == 300
