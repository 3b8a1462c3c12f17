"""Work stealing's choice of a thief in O(log W) per task instead of O(W).

Dask's ``WorkStealing.balance`` (every 100 ms while tasks wait) takes each stealable task of a
saturated worker and gives it to ``min(idle workers, key=stealing_objective)``: one pass over
every idle worker per task, O(tasks x W) in one turn of the scheduler's loop. Measured at
10,000 simulated workers under Dask's defaults (benchmarks.scale, docs/scale.md): the longest
turn of the computation, 5.34 s wall (4.47 s of the loop's CPU), had work stealing's
``stealing_objective`` and ``get_comm_cost`` in half its samples.

``stealing_objective(ts, ws)`` is ``(occupancy(ws) / threads(ws) + transfer(ts, ws),
bytes held by ws)``, where ``transfer`` is the size of ts's dependencies that ws does not hold.
A worker holding none of them has the same ``transfer`` as any other such worker, so among
those the least is the one with the least ``(occupancy / threads, bytes held)``: kept in a heap
for the turn (the occupancies balance reads are fixed for the turn; a thief's in-flight
occupancy only grows as tasks are handed to it: its entry is re-keyed when it comes to the
top). The thief is then Dask's own objective's least among that worker and the workers holding
some of ts's dependencies, ties going to the first in the idle set's order, as ``min`` does:
the same worker Dask picks (tests/test_stealing.py compares them over many random states).
Tasks with restrictions or actors keep Dask's method. Building the heap is O(W) once per turn
that has something to steal, as is Dask's own dictionary of occupancies in the same turn.

Checked against distributed 2026.7.1 and 2026.8.0 (WorkStealing._get_thief and
stealing_objective unchanged between them); measured by benchmarks/stealing.py.
"""

from __future__ import annotations

import heapq
from typing import Any

from distributed import Scheduler
from distributed.stealing import WorkStealing

Key = tuple[float, int]


class _Thieves:
    """One balance turn's idle workers, least loaded first, by Dask's objective without the
    transfer (which is the same for every worker that holds none of a task's inputs)."""

    def __init__(self, stealing: WorkStealing, thieves: set[Any], occupancies: dict) -> None:
        self.stealing, self.thieves, self.occupancies = stealing, thieves, occupancies
        self.order = {ws: i for i, ws in enumerate(thieves)}  # set order: min's tie-break
        self.heap = [(self.key(ws), i, ws) for ws, i in self.order.items()]
        heapq.heapify(self.heap)

    def key(self, ws: Any) -> Key:
        occupancy = self.stealing._combined_occupancy(ws, occupancies=self.occupancies)
        return (occupancy / ws.nthreads, ws.nbytes)

    def least_without(self, holders: set[Any]) -> Any:
        """The least loaded thief not in ``holders``, or None."""
        heap, aside, found = self.heap, [], None
        while heap:
            key, i, ws = heap[0]
            if ws not in self.thieves:  # no longer a thief this turn
                heapq.heappop(heap)
            elif (now := self.key(ws)) != key:  # it was handed a task meanwhile
                heapq.heapreplace(heap, (now, i, ws))
            elif ws in holders:
                aside.append(heapq.heappop(heap))
            else:
                found = ws
                break
        for item in aside:
            heapq.heappush(heap, item)
        return found


class Stealing:
    """``_get_thief`` for one scheduler's WorkStealing, with the index of the current turn."""

    def __init__(self, stealing: WorkStealing) -> None:
        self.stealing = stealing
        self.dasks = WorkStealing._get_thief.__get__(stealing)
        self.turn: _Thieves | None = None

    def get_thief(
        self, scheduler: Any, ts: Any, potential_thieves: set[Any], *, occupancies: dict
    ) -> Any:
        if ts.actor or scheduler.valid_workers(ts) is not None:
            return self.dasks(scheduler, ts, potential_thieves, occupancies=occupancies)
        turn = self.turn
        if turn is None or turn.thieves is not potential_thieves or (
            turn.occupancies is not occupancies
        ):
            turn = self.turn = _Thieves(self.stealing, potential_thieves, occupancies)
        holders = {ws for dts in ts.dependencies for ws in (dts.who_has or ())}
        holders &= potential_thieves
        least = turn.least_without(holders)
        candidates = sorted([*holders, *([least] if least is not None else [])],
                            key=turn.order.__getitem__)
        objective = self.stealing.stealing_objective
        return min(candidates, key=lambda ws: objective(ts, ws, occupancies=occupancies))


def install(scheduler: Scheduler) -> Stealing | None:
    """Give the scheduler's work stealing (if on) this choice of a thief."""
    stealing = scheduler.extensions.get("stealing")
    if not isinstance(stealing, WorkStealing):
        return None
    ours = Stealing(stealing)
    stealing._get_thief = ours.get_thief  # type: ignore[method-assign]
    return ours
