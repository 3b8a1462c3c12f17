"""Work stealing's pick of thieves in one balance turn: Dask's ``_get_thief`` against
``dask_hpc.at_scale.stealing`` (the same picks), at W idle workers and T stealable tasks.

The state is a tree sum's, as in benchmarks.scale: each task has 1-10 inputs, each held by one
worker; the idle workers' occupancies are 0 or small. Each pick is followed by what
``balance`` does with the thief (its in-flight occupancy grows, a busy one leaves the set).

    PYTHONPATH=src python -m benchmarks.stealing [--workers 1000 10000] [--tasks 100 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from distributed import Scheduler
from distributed.core import Status
from distributed.scheduler import TaskGroup, TaskPrefix, TaskState, WorkerState
from distributed.stealing import WorkStealing

from dask_hpc.at_scale.stealing import Stealing


def state(scheduler: Scheduler, n_workers: int, n_tasks: int, seed: int = 0):
    rng = random.Random(seed)
    pool = [WorkerState(address=f"tls://127.1.{i // 250}.{i % 250}:1", status=Status.running,
                        pid=i, name=i, nthreads=1, memory_limit=0, local_directory="/none",
                        nanny=None, server_id=str(i), scheduler=scheduler)
            for i in range(n_workers)]
    group = TaskGroup("sum", TaskPrefix("sum"))
    todo = []
    for i in range(n_tasks):
        ts = TaskState(f"sum-{i}", None, "processing", group, validate=False)
        for j in range(rng.randint(1, 10)):
            dts = TaskState(f"leaf-{i}-{j}", None, "memory", group, validate=False)
            dts.set_nbytes(28)
            scheduler.add_replica(dts, rng.choice(pool))
            ts.add_dependency(dts)
        todo.append(ts)
    occupancies = {ws: rng.choice([0.0, 0.0, 0.0, 0.01, 0.02]) for ws in pool}
    return pool, todo, occupancies


def turn(pick, stealing: WorkStealing, scheduler, pool, todo, occupancies) -> tuple[float, list]:
    """Seconds for one turn's picks, and the thieves picked."""
    stealing.in_flight_occupancy.clear()
    thieves = set(pool)
    picked = []
    start = time.process_time()
    for ts in todo:
        if not thieves:
            break
        thief = pick(scheduler, ts, thieves, occupancies=occupancies)
        picked.append(thief)
        stealing.in_flight_occupancy[thief] += 0.05
        if stealing.in_flight_occupancy[thief] > 0.1:
            thieves.discard(thief)
    return time.process_time() - start, picked


async def measure(n_workers: int, n_tasks: int) -> tuple[float, float, bool]:
    async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
        stealing = scheduler.extensions["stealing"]
        pool, todo, occupancies = state(scheduler, n_workers, n_tasks)
        dasks_time, dasks = turn(WorkStealing._get_thief.__get__(stealing), stealing,
                                 scheduler, pool, todo, occupancies)
        ours_time, ours = turn(Stealing(stealing).get_thief, stealing, scheduler, pool, todo,
                               occupancies)
        return dasks_time, ours_time, all(a is b for a, b in zip(dasks, ours, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100, 1000])
    args = parser.parse_args()
    print("| idle workers | stealable tasks | Dask's picks (s CPU) | ours (s CPU) | same picks |")
    print("|---|---|---|---|---|")
    for workers in args.workers:
        for tasks in args.tasks:
            dasks, ours, same = asyncio.run(measure(workers, tasks))
            same_text = "yes" if same else "NO"
            print(f"| {workers:,} | {tasks:,} | {dasks:.3f} | {ours:.4f} | {same_text} |")


if __name__ == "__main__":
    main()
