"""Dask's pick of a worker for root-ish tasks with queuing (its default) as a turn fills W free
workers: a plain set (Dask's ``idle_task_count``) against ``dask_hpc.at_scale.many_workers``'s
``IdleTaskCount``, through Dask's own ``decide_worker_rootish_queuing_enabled``.

Each of W one-thread workers has two slots (``worker-saturation`` 1.1: ceil(1.1) = 2), so 2W
picks fill them; after each, the worker's task is added and Dask's ``check_idle_saturated``
keeps the set, as when a root-ish group arrives on an idle cluster.

    PYTHONPATH=src python -m benchmarks.queuing_pick [--workers 1000 10000]
"""

from __future__ import annotations

import argparse
import time

from distributed.core import Status
from distributed.scheduler import SchedulerState, WorkerState

from dask_hpc.at_scale.many_workers import IdleTaskCount


class State:
    """What Dask's pick and ``check_idle_saturated`` read of the scheduler's state."""

    validate = False
    WORKER_SATURATION = 1.1
    total_nthreads = 1
    total_occupancy = 0.0

    def __init__(self, free: set) -> None:
        self.idle_task_count = free
        self.idle: dict = {}
        self.saturated: set = set()

    def is_unoccupied(self, ws: WorkerState, occupancy: float, processing: int) -> bool:
        return processing < ws.nthreads


def fill(n_workers: int, free: set) -> tuple[float, int]:
    """Seconds for the 2W picks, and the most tasks one worker got (2: every slot used)."""
    state = State(free)
    workers = [WorkerState(address=f"tls://127.1.{i // 250}.{i % 250}:1", status=Status.running,
                           pid=i, name=i, nthreads=1, memory_limit=0, local_directory="/none",
                           nanny=None, server_id=str(i), scheduler=None)
               for i in range(n_workers)]  # fmt: skip
    for ws in workers:
        SchedulerState.check_idle_saturated(state, ws, 0.0)  # type: ignore[arg-type]
    start = time.perf_counter()
    for task in range(2 * n_workers):
        ws = SchedulerState.decide_worker_rootish_queuing_enabled(state)  # type: ignore[arg-type]
        ws.processing.add(task)  # type: ignore[union-attr, arg-type]
        SchedulerState.check_idle_saturated(state, ws, 0.0)  # type: ignore[arg-type]
    took = time.perf_counter() - start
    assert not free and SchedulerState.decide_worker_rootish_queuing_enabled(state) is None  # type: ignore[arg-type]
    return took, max(len(ws.processing) for ws in workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    print("| W | picks | Dask's set (s) | IdleTaskCount (s) | speed-up |")
    print("|---|---|---|---|---|")
    for n in args.workers:
        dask, most = fill(n, set())
        ours, most_ours = fill(n, IdleTaskCount())
        assert most == most_ours == 2
        # Four significant digits, whatever the size: a fixed number of decimals printed a
        # measured 0.0004 s as 0.000 (issue 47).
        print(f"| {n:,} | {2 * n:,} | {dask:.4g} | {ours:.4g} | {dask / ours:.3g}x |")


if __name__ == "__main__":
    main()
