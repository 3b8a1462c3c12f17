"""A task with many dependencies placed in one pass over them, not one pass per candidate.

Dask places a task that has dependencies (``decide_worker_non_rootish``) on the candidate that
minimises ``worker_objective``: its start time, which adds the bytes of the task's
dependencies the worker does not hold (``get_comm_cost``) over the bandwidth. Every worker
holding one of the task's D dependencies is a candidate, and each candidate's cost goes over
all D: O(W x D) in one turn of the scheduler's loop. Measured at 10,000 simulated workers
(``benchmarks.scale.faults --scenario kill``, 2 cores, 2026-11-29): one task checking 25,000
results held by 9,000 workers, a turn of 23.0 s, 20.3 s of it the loop's CPU, its samples in
``get_comm_cost``. Here the bytes each candidate holds are summed once per placement (one pass
over the dependencies' holders) and each candidate's cost is the total less what it holds: the
same integers over the same bandwidth, so the same objective and the same pick as Dask's
(``benchmarks/many_dependencies.py`` times both; ``tests/test_many_dependencies.py`` compares
them on a live scheduler).

Replaces, on one scheduler: ``decide_worker_non_rootish`` (Dask's, around a placement) and
``worker_objective`` (Dask's, but for the task being placed). Checked against distributed
2026.7.1 and 2026.8.0 (``get_comm_cost``, ``worker_objective``, ``decide_worker`` and
``decide_worker_non_rootish`` the same in both).
"""

from __future__ import annotations

from typing import Any

from distributed import Scheduler


def held_bytes(ts: Any) -> tuple[dict[Any, int], int]:
    """Per worker, the bytes of ``ts``'s dependencies it holds; and the bytes of them all."""
    held: dict[Any, int] = {}
    total = 0
    for dts in ts.dependencies:
        nbytes = dts.get_nbytes()
        total += nbytes
        for ws in dts.who_has or ():
            held[ws] = held.get(ws, 0) + nbytes
    return held, total


class Placement:
    """Dask's placement of a task with dependencies, its candidates' costs read from one pass
    (``held_bytes``, made at the first candidate's, so not for a single candidate)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.dask_decide = scheduler.decide_worker_non_rootish
        self.dask_objective = scheduler.worker_objective
        self.ts: Any = None  # the task being placed
        self.held: dict[Any, int] | None = None
        self.total = 0

    def decide_worker_non_rootish(self, ts: Any) -> Any:
        self.ts, self.held = ts, None
        try:
            return self.dask_decide(ts)
        finally:
            self.ts, self.held = None, None

    def worker_objective(self, ts: Any, ws: Any) -> tuple:
        """Dask's objective: (start time, bytes held), actors first by their count."""
        if ts is not self.ts:
            return self.dask_objective(ts, ws)
        if self.held is None:
            self.held, self.total = held_bytes(ts)
        comm_cost = (self.total - self.held.get(ws, 0)) / self.scheduler.bandwidth
        start_time = ws.occupancy / ws.nthreads + comm_cost
        if ts.actor:
            return (len(ws.actors), start_time, ws.nbytes)
        return (start_time, ws.nbytes)


def install(scheduler: Scheduler) -> Placement:
    """Place this scheduler's tasks with dependencies in one pass over them."""
    placement = Placement(scheduler)
    scheduler.decide_worker_non_rootish = placement.decide_worker_non_rootish  # type: ignore[method-assign]
    scheduler.worker_objective = placement.worker_objective  # type: ignore[method-assign]
    return placement
