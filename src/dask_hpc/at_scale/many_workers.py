"""What start-cluster's scheduler does differently so that its cost per worker stays flat.

Each piece answers a measurement of ``benchmarks.scale`` (docs/scale.md) and changes
nothing a Dask user sees: the same warnings, the same state, less work per worker.

- Dask's version check: each joining worker (and each client) is compared with one worker per
  distinct set of package versions, not with every connected worker.
- Removing a worker does not go over every remaining worker: at the cluster's end not at all,
  otherwise the others are told of the workers removed in one turn at the next (``removals``).
- Root tasks placed without queuing (``worker-saturation: inf``) stop looking for a worker at
  the first idle one that no other can beat; with queuing (Dask's default), the least loaded
  free worker is kept at hand.
- Python's full garbage collections leave the scheduler's long-lived objects alone.

Measured (benchmarks.scale at 10,000 workers, docs/scale.md): the version check and the
removals, the scheduler loop's CPU per join 6.92 -> 2.51 ms, per removal 2.54 -> 1.51 ms, all
connected 163.6 -> 78.6 s; the root tasks, one 158.8 s turn of the loop at 100,000 of them
(issue 28); the frozen objects, 55 full collections of 0.46 s at 10,000 idle workers. Checked
against distributed 2026.7.1 (the range's low end, constraints.txt) and 2026.8.0 (the newest in
range: tests/test_newest_dask.py runs its tests there).
"""

from __future__ import annotations

import gc
import inspect
import sys
from typing import Any

from distributed import Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin
from sortedcontainers import SortedDict
from tornado.ioloop import PeriodicCallback

from .removals import ToldTogether


class _DistinctVersions(SchedulerPlugin):
    """The connected workers grouped by their package versions, kept up to date as they come
    and go (the scheduler's add_worker and remove_worker hooks: O(1) per worker)."""

    name = "dask-hpc-distinct-versions"

    def __init__(self) -> None:
        self.key_of: dict[str, str] = {}  # worker -> its versions, as a string
        self.holders: dict[str, dict[str, None]] = {}  # versions -> their workers, in order

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self._add(worker, scheduler.workers[worker].versions)

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        self._remove(worker)

    def _add(self, worker: str, versions: dict | None) -> None:
        # A string: its hash is computed once (a tuple's is computed on every lookup).
        key = repr(sorted(versions["packages"].items())) if versions else "UNKNOWN"
        self.key_of[worker] = key
        self.holders.setdefault(key, {})[worker] = None

    def _remove(self, worker: str) -> None:
        key = self.key_of.pop(worker, None)
        if key is not None:
            del self.holders[key][worker]
            if not self.holders[key]:
                del self.holders[key]

    def representatives(self, workers: SortedDict) -> list[tuple[str, Any]]:
        """(address, WorkerState) of one worker (the earliest) per distinct set of versions.

        The hooks keep the groups in step with the scheduler's workers, so this is O(number of
        distinct sets). Workers the hooks have not seen (another count) are caught up with
        first, in O(W).
        """
        if len(workers) != len(self.key_of):
            for gone in self.key_of.keys() - workers.keys():
                self._remove(gone)
            for new in workers.keys() - self.key_of.keys():
                self._add(new, workers[new].versions)
        return [(w, workers[w]) for w in (next(iter(h)) for h in self.holders.values())]


# Where Dask checks versions: ``{w: ws.versions for w, ws in self.workers.items()}``, passed to
# ``distributed.versions.error_message`` (Scheduler.add_worker and add_client).
_VERSION_CHECKS = frozenset(
    inspect.unwrap(method).__code__ for method in (Scheduler.add_worker, Scheduler.add_client)
)
# Where Dask places a root-ish task without queuing: ``min(self.idle.values(), key=objective)``.
_ROOTISH_NO_QUEUING = inspect.unwrap(Scheduler.decide_worker_rootish_queuing_disabled).__code__
# Where Dask places a root-ish task with queuing: ``min(self.idle_task_count, key=...)``.
_ROOTISH_QUEUING = inspect.unwrap(Scheduler.decide_worker_rootish_queuing_enabled).__code__
# Where Dask goes over every remaining worker for each one removed (``for w in self.workers``):
# to drop the pair's bandwidth estimates, and to send each a ``remove-worker`` message.
_REMOVE_WORKER = inspect.unwrap(Scheduler.remove_worker).__code__


class Workers(SortedDict):
    """``scheduler.workers`` (Dask's SortedDict), whose ``items()`` at Dask's version check
    holds one worker per distinct set of package versions.

    ``Scheduler.add_worker`` builds a dictionary of every connected worker's versions to
    compare the joining worker's with: O(W) per join, O(W^2) per start, with no hook between
    building it and checking it. Measured with benchmarks.scale: half the scheduler's CPU at
    2,000 workers while Dask compared every pair (fixed since 2026-11-23 by comparing the
    distinct sets: same warnings); building the dictionary alone, 0.4 us per worker, ~2 ms per
    join at 10,000 workers, as much as the rest of a join. The same warnings come from one
    worker per distinct set: that is what the version check's call sites (add_worker,
    add_client, recognised by their code object) iterate; everything else sees every worker.
    """

    distinct: _DistinctVersions | None = None
    ending = False  # the cluster ends (see __iter__)
    told: ToldTogether | None = None  # tells the others of removed workers, together

    def items(self) -> Any:
        if self.distinct is not None and sys._getframe(1).f_code in _VERSION_CHECKS:
            return self.distinct.representatives(self)
        return super().items()

    def __iter__(self) -> Any:
        """Every worker, but none to ``Scheduler.remove_worker``.

        Dask's ``remove_worker`` goes over every remaining worker twice per removal: to drop
        the pair's bandwidth estimates and to tell each that the worker left. When the cluster
        ends and every worker is closed, both are work for nothing, and O(W^2) in all:
        499,500 messages at 1,000 workers (1.2 s of the scheduler's CPU), ~50 million at
        10,000 (replayed, the two loops alone: 0.21 s at 1,000 workers, 0.74 s at 2,000, ~18 s
        at 10,000). Otherwise the remaining workers are told of every worker removed in a turn
        at once, at the next turn (``told``: ``removals.ToldTogether``). Its state of each
        worker (``self.workers``, comms, hosts, tasks) is removed as always.
        """
        frame = sys._getframe(1)
        if frame.f_code is _REMOVE_WORKER:
            if self.ending:
                return iter(())
            if self.told is not None:
                removal = frame.f_locals
                self.told.later(removal["address"], removal["stimulus_id"])
                return iter(())
        return super().__iter__()


class IdleWorkers(SortedDict):
    """``scheduler.idle`` (Dask's SortedDict of the workers with a thread free), whose
    ``values()`` at Dask's placement of root tasks without queuing ends at the first worker
    that no other can beat.

    With ``worker-saturation: inf`` Dask gives each root task group's tasks to one worker at a
    time (``len(group) / threads`` each), and picks each new one with ``min(idle workers,
    key=worker_objective)``: O(W) per pick, W picks per group, O(W^2) in one turn of the loop.
    Measured at 10,000 workers (benchmarks.scale, issue 28): one turn of 158.8 s, 134.4 s of
    its CPU, as 100,000 root tasks arrived. ``worker_objective`` is ``(start time, bytes held)``
    (actors: ``(actors, start time, bytes held)``), none below zero: a worker with nothing
    queued, no transfer to wait for and no data has the least there is, and ``min`` keeps the
    first of equals. So the workers are handed out in Dask's order up to the first such one,
    and ``min`` returns what it would have returned from all of them. In a cluster whose
    workers hold data, no such worker may be found: then ``min`` sees every worker, as in Dask.
    """

    scheduler: Scheduler | None = None

    def values(self) -> Any:
        frame = sys._getframe(1)
        if self.scheduler is None or frame.f_code is not _ROOTISH_NO_QUEUING:
            return super().values()
        return self._until_unbeatable(frame.f_locals["ts"])

    def _until_unbeatable(self, ts: Any) -> Any:
        assert self.scheduler is not None
        objective, least = self.scheduler.worker_objective, (0, 0, 0) if ts.actor else (0, 0)
        for ws in super().values():
            yield ws
            if objective(ts, ws) == least:
                return


class IdleTaskCount(set):
    """``scheduler.idle_task_count`` (Dask's set of the workers with a task slot free), which
    also keeps its workers by load (tasks processing / threads, the key of Dask's pick): at
    Dask's placement of a root-ish task with queuing, ``min`` is handed one least-loaded
    worker instead of every free one.

    With queuing (``worker-saturation`` 1.1, Dask's default) a group of more tasks than twice
    the cluster's threads is root-ish: each task goes to ``min(idle_task_count, key=load)``,
    O(W) per task, O(W^2) while a turn fills W free workers (a one-thread worker has two
    slots, so every worker is free twice). Measured at 10,000 simulated workers on 16 cores
    (benchmarks.scale.faults, 50,000 one-second tasks, 2026-11-28): 516 of the computation's
    560 samples of a late scheduler loop were in that key. benchmarks/queuing_pick.py, Dask's
    own pick filling 10,000 free workers: 25.1 s in one turn, 0.17 s with this. Dask keeps the
    set in step with each worker's load (``check_idle_saturated`` adds a free worker after
    every change of its tasks), which is when its bucket is updated; a worker whose load
    changed without it is moved when met. The pick has the least load there is, as Dask's;
    among equals, the one at that load longest (Dask's: the set's order).
    """

    def __init__(self) -> None:
        super().__init__()
        self._load_of: dict[Any, float] = {}  # worker -> the load it is kept under
        self._by_load: dict[float, dict[Any, None]] = {}  # load -> its workers, in order

    def add(self, ws: Any) -> None:
        super().add(ws)
        self._file(ws)

    def discard(self, ws: Any) -> None:
        super().discard(ws)
        self._unfile(ws)

    def remove(self, ws: Any) -> None:
        super().remove(ws)
        self._unfile(ws)

    def __iter__(self) -> Any:
        if sys._getframe(1).f_code is _ROOTISH_QUEUING:
            least = self.least()
            return iter(() if least is None else (least,))
        return super().__iter__()

    def least(self) -> Any:
        """A free worker with the least load (None if there is none)."""
        while self._by_load:
            load = min(self._by_load)
            for ws in self._by_load[load]:
                if ws not in self:  # removed other than by discard (copy, clear): drop it
                    self._unfile(ws)
                elif _load(ws) != load:  # its load changed unseen: file it anew
                    self._file(ws)
                else:
                    return ws
                break  # the dictionary changed: look again
        return None

    def _file(self, ws: Any) -> None:
        load = _load(ws)
        if self._load_of.get(ws) == load:
            return
        self._unfile(ws)
        self._load_of[ws] = load
        self._by_load.setdefault(load, {})[ws] = None

    def _unfile(self, ws: Any) -> None:
        load = self._load_of.pop(ws, None)
        if load is not None:
            bucket = self._by_load[load]
            del bucket[ws]
            if not bucket:
                del self._by_load[load]


def _load(ws: Any) -> float:
    """Dask's key for the pick: tasks processing per thread (a worker without threads last:
    Dask's key would divide by zero at the pick, this is read at every add)."""
    return len(ws.processing) / ws.nthreads if ws.nthreads else float("inf")


class _LongLivedOutOfGC(SchedulerPlugin):
    """Keeps the scheduler's long-lived objects out of Python's full garbage collections.

    A full collection walks every object of the process, and the scheduler holds hundreds per
    worker: each one stalls its event loop for a time that grows with the cluster. Dask's
    modules, the dashboard, and the workers connected so far (each time their number grew by a
    tenth) are moved to the collector's permanent generation (``gc.freeze``, O(1)), so a full
    collection walks what was made since. Measured with benchmarks.scale at 1,000 workers
    (the scheduler's thread CPU in the collector): 5 full collections of ~107 ms, 0.72 s of GC
    in all; frozen, 3 of ~46 ms, 0.32 s. An idle cluster's heartbeats replace every worker's
    metrics (nested dictionaries) once per round: at 10,000 workers, 55 full collections of
    0.46 s (25 s of CPU, the longest 0.97 s) walked them; so what was made is also frozen once
    a minute while idle. Each freeze comes right after a full collection (cheap: most is frozen
    already), so no cyclic garbage is frozen, and never while the scheduler holds tasks (a
    computation's task states, cyclic once released, would stay in memory).
    """

    name = "dask-hpc-long-lived"
    idle_every = 60.0  # s between freezes of an idle scheduler
    # Python collects its youngest generation once 700 more container objects were made than
    # freed since (a burst counts, even one freed soon after); after 11 of those the middle
    # one, and after 11 of these a full collection, once what the last full one kept grew by
    # a quarter. With nearly everything frozen that quarter is of almost nothing, so the
    # scheduler's bursts of messages brought a full collection every few seconds: at 10,000
    # workers 127 in one run (benchmarks.scale.faults, kill: 45.6 s of the loop's CPU). After
    # 50,000, not 700 (benchmarks.scale, 2,000 workers, 22,223 tasks, 2026-11-30): young
    # passes 2,827 -> 27, their CPU 1.40 -> 1.28 s; full ones 54 -> 38 (the rest are the
    # freezes' own), 2.20 -> 0.42 s.
    young_threshold = 50_000

    def __init__(self) -> None:
        gc.freeze()
        self.thresholds = gc.get_threshold()  # put back at the scheduler's close
        gc.set_threshold(self.young_threshold, *self.thresholds[1:])
        self.next_freeze = 64  # workers
        self.timer: PeriodicCallback | None = None

    async def start(self, scheduler: Scheduler) -> None:
        self.timer = PeriodicCallback(lambda: self.freeze(scheduler), self.idle_every * 1000)
        self.timer.start()

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.stop()
        gc.set_threshold(*self.thresholds)

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        if len(scheduler.workers) >= self.next_freeze and self.freeze(scheduler):
            self.next_freeze = int(self.next_freeze * 1.1) + 1

    @staticmethod
    def freeze(scheduler: Scheduler) -> bool:
        """Collect, then freeze what is left (not while there are tasks); whether it did."""
        if scheduler.tasks:
            return False
        gc.collect()
        gc.freeze()
        return True


def install(scheduler: Scheduler) -> _DistinctVersions:
    """Set up a scheduler not yet started (no worker yet); returns its groups of versions."""
    assert not scheduler.workers, "before any worker joins"
    distinct = _DistinctVersions()
    workers = Workers()
    workers.distinct = distinct
    workers.told = ToldTogether(scheduler)
    scheduler.workers = workers
    assert not scheduler.idle, "before any worker joins"
    idle = IdleWorkers()
    idle.scheduler = scheduler
    scheduler.idle = idle
    assert not scheduler.idle_task_count, "before any worker joins"
    scheduler.idle_task_count = IdleTaskCount()
    scheduler.add_plugin(distinct)
    scheduler.add_plugin(_LongLivedOutOfGC())
    return distinct
