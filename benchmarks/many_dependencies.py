"""Dask's placement of one task with D dependencies spread over W workers: Dask's own
``decide_worker_non_rootish`` against ``dask_hpc.at_scale.dependencies`` (one pass over the
dependencies), on a real scheduler's state.

As in the faults benchmark's check (``benchmarks/scale/faults_job.py``): D results, each held by
one worker, round robin, then one task that needs them all. Both picks are checked to be the
same worker.

    PYTHONPATH=src python -m benchmarks.many_dependencies [--workers 1000 10000]
        [--dependencies 25000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from distributed import Scheduler
from distributed.core import Status
from distributed.scheduler import SchedulerState, TaskGroup, TaskPrefix, TaskState, WorkerState

from dask_hpc.at_scale import dependencies


async def place(n_workers: int, n_dependencies: int) -> tuple[float, float]:
    """Seconds of Dask's placement and of ours, for one task (the same worker picked)."""
    async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
        pool = [WorkerState(address=f"tls://127.1.{i // 250}.{i % 250}:1", status=Status.running,
                            pid=i, name=i, nthreads=1, memory_limit=0, local_directory="/none",
                            nanny=None, server_id=str(i), scheduler=scheduler)
                for i in range(n_workers)]  # fmt: skip
        scheduler.running = set(pool)
        group = TaskGroup("check", TaskPrefix("check"))
        ts = TaskState("check", None, "waiting", group, validate=False)
        for i in range(n_dependencies):
            dts = TaskState(f"work-{i}", None, "memory", group, validate=False)
            dts.set_nbytes(28)  # a small int's
            scheduler.add_replica(dts, pool[i % n_workers])
            ts.add_dependency(dts)
        start = time.perf_counter()
        dasks = SchedulerState.decide_worker_non_rootish(scheduler, ts)
        dask_s = time.perf_counter() - start
        dependencies.install(scheduler)
        start = time.perf_counter()
        ours = scheduler.decide_worker_non_rootish(ts)
        ours_s = time.perf_counter() - start
        assert ours is dasks, (ours, dasks)
        scheduler.running = set()
        return dask_s, ours_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--dependencies", type=int, default=25000)
    args = parser.parse_args()
    logging.getLogger("distributed").setLevel(logging.ERROR)  # its turn of Dask's placement
    print("| W | dependencies | Dask's placement (s) | one pass (s) | speed-up |")
    print("|---|---|---|---|---|")
    for n in args.workers:
        dask_s, ours_s = asyncio.run(place(n, args.dependencies))
        print(f"| {n:,} | {args.dependencies:,} | {dask_s:.4g} | {ours_s:.4g} | "
              f"{dask_s / ours_s:.3g}x |")  # fmt: skip


if __name__ == "__main__":
    main()
