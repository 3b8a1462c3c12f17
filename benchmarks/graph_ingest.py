"""How long a scheduler's loop is blocked while a graph arrives: Dask's synchronous part of
``update_graph`` (``_create_taskstate_from_graph``: the task states made, the first
transitions), whose own comment says it "HAS TO BE SYNCHRONOUS" (one turn of the loop).

    PYTHONPATH=src python -m benchmarks.graph_ingest [--workers 8 64] [--tasks 10000 50000 100000]

The graph is benchmarks.scale's tree sum (T leaves, sums of 10). The scheduler is set up as
start-cluster's is (``at_scale``: IdleWorkers, work stealing's thief, gated writes); W real
workers in this process, one thread each. The table: the loop thread's CPU in that part, and
per task, under Dask's default queuing (1.1) and under ``inf``. The part does not grow with W:
it is what the graph costs, one turn however large the cluster (docs/scale.md).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import dask
from distributed import Client, Scheduler, Worker

from dask_hpc.at_scale import many_workers, sends, stealing

from .scale.job import tree_sum


async def ingest_cpu(workers: int, leaves: int, saturation: float) -> tuple[int, float]:
    """(tasks, loop CPU seconds of the synchronous part) for one graph."""
    config = {"distributed.scheduler.worker-saturation": saturation}
    with dask.config.set(config):
        async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
            many_workers.install(scheduler)
            stealing.install(scheduler)
            sends.install(scheduler)
            took: list[float] = []
            dasks = scheduler._create_taskstate_from_graph

            def timed(*args: Any, **kwargs: Any) -> Any:
                start = time.thread_time()
                try:
                    return dasks(*args, **kwargs)
                finally:
                    took.append(time.thread_time() - start)

            scheduler._create_taskstate_from_graph = timed  # type: ignore[method-assign]
            started = [Worker(scheduler.address, nthreads=1) for _ in range(workers)]
            await asyncio.gather(*started)
            try:
                async with Client(scheduler.address, asynchronous=True) as client:
                    graph, key = tree_sum(leaves, 10)
                    future = client.get(graph, key, sync=False)
                    deadline = time.monotonic() + 600
                    while not took and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)  # the graph's arrival, polled
                    await client.cancel(future)
            finally:
                await asyncio.gather(*(w.close() for w in started))
            if not took:
                raise RuntimeError("the graph never reached the scheduler")
            return len(graph), took[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, nargs="+", default=[8, 64])
    p.add_argument("--tasks", type=int, nargs="+", default=[10_000, 50_000, 100_000],
                   help="leaves of the tree sum")  # fmt: skip
    opts = p.parse_args()
    print("| W | leaves (tasks) | queuing (1.1): loop CPU s; us a task "
          "| inf: loop CPU s; us a task |")
    print("|---|---|---|---|")
    for workers in opts.workers:
        for leaves in opts.tasks:
            cells = []
            for saturation in (1.1, float("inf")):
                tasks, cpu = asyncio.run(ingest_cpu(workers, leaves, saturation))
                cells.append(f"{cpu:.4f}; {1e6 * cpu / tasks:.0f}")  # thread_time: ns
            print(f"| {workers} | {leaves:,} ({tasks:,}) | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
