"""Removing workers from a real scheduler's state: Dask's own ``Scheduler.remove_worker`` against
start-cluster's scheduler (``at_scale.many_workers``, ``at_scale.removals``), side by side in one
process, on the same W workers.

Two cases, each as Dask removes a worker whose connection closed (``handle_worker``'s cleanup):
- **end**: every worker leaves (a job's end, ``scancel``): start-cluster's scheduler knows the
  cluster ends (``closing``) and tells no one;
- **lost**: a tenth of the workers leave in one turn (a killed node or switch) and the others
  stay: each remaining worker is told of each lost one, by Dask in every removal, by
  ``removals`` once for all of them at the next turn (counted here until every one is told).

Workers are Dask's ``WorkerState`` registered as ``add_worker`` registers them, each with a
stream that counts the messages sent to it (no sockets: what is measured is the scheduler's own
work, the floor under any real stop). The messages each case sends are counted and printed.

    PYTHONPATH=src python -m benchmarks.removals [--workers 1000 10000] [--lost 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from typing import Any

import dask
from distributed import Scheduler
from distributed.core import Status
from distributed.scheduler import WorkerState

from dask_hpc.at_scale import many_workers


class CountingStream:
    """Stands in for a worker's ``BatchedSend``: counts what is sent."""

    sent = 0

    def send(self, *msgs: Any) -> None:
        CountingStream.sent += len(msgs)


def register(scheduler: Scheduler, n_workers: int) -> list[str]:
    """n workers in the scheduler's state, as ``Scheduler.add_worker`` leaves them."""
    addresses = []
    for i in range(n_workers):
        host = f"127.1.{i // 250}.{i % 250}"
        address = f"tls://{host}:1"
        ws = WorkerState(address=address, status=Status.running, pid=i, name=i, nthreads=1,
                         memory_limit=0, local_directory="/none", nanny=None, server_id=str(i),
                         scheduler=scheduler)  # fmt: skip
        scheduler.workers[address] = ws
        info = scheduler.host_info.setdefault(host, {"addresses": set(), "nthreads": 0})
        info["addresses"].add(address)
        info["nthreads"] += 1
        scheduler.total_nthreads += 1
        scheduler.aliases[i] = address
        scheduler.stream_comms[address] = CountingStream()
        scheduler.running.add(ws)
        scheduler.idle[address] = ws
        scheduler.idle_task_count.add(ws)
        for plugin in list(scheduler.plugins.values()):
            plugin.add_worker(scheduler=scheduler, worker=address)
        addresses.append(address)
    return addresses


async def remove(n_workers: int, lost: float, ours: bool, case: str) -> tuple[float, int, int]:
    """(seconds, removals, messages sent) of one case on a fresh scheduler."""
    logging.getLogger("distributed").setLevel(logging.ERROR)  # a line per removal otherwise
    # The active memory manager reads every worker's heartbeat metrics, which these have none of
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        scheduler = Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0")
    async with scheduler:
        if ours:
            many_workers.install(scheduler)
        addresses = register(scheduler, n_workers)
        gone = addresses if case == "end" else addresses[:: round(1 / lost)]
        CountingStream.sent = 0
        start = time.perf_counter()
        if case == "end" and ours:
            scheduler.workers.ending = True  # what closing.close_workers sets
        await asyncio.gather(
            *(scheduler.remove_worker(a, stimulus_id=f"handle-worker-cleanup-{i}")
              for i, a in enumerate(gone))
        )  # fmt: skip
        if ours:
            await scheduler.workers.told.told()
        seconds = time.perf_counter() - start
        sent = CountingStream.sent
        if ours:
            scheduler.workers.ending = True  # the rest go as at a cluster's end
        for address in list(scheduler.workers):
            await scheduler.remove_worker(address, stimulus_id="benchmark-end", close=False)
        return seconds, len(gone), sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--lost", type=float, default=0.1, help="the share lost at once")
    args = parser.parse_args()
    print("| W | case | removals | Dask (s) | dask-hpc (s) | Dask per removal (ms) | "
          "dask-hpc per removal (ms) | messages, Dask | messages, dask-hpc |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.workers:
        for case in ("end", "lost"):
            dask_s, removals, dask_sent = asyncio.run(remove(n, args.lost, False, case))
            ours_s, _, ours_sent = asyncio.run(remove(n, args.lost, True, case))
            print(f"| {n:,} | {case} | {removals:,} | {dask_s:.4g} | {ours_s:.4g} | "
                  f"{1000 * dask_s / removals:.4g} | {1000 * ours_s / removals:.4g} | "
                  f"{dask_sent:,} | {ours_sent:,} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
