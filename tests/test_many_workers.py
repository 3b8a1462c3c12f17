"""The scheduler's cost per worker (dask_hpc.at_scale.many_workers): Dask's version check sees one
worker per distinct set of versions, with a real scheduler and workers; and the freezing of
long-lived objects out of the garbage collector's way."""

from __future__ import annotations

import asyncio
import logging

import pytest
from distributed import Client, Scheduler, Worker, versions

from dask_hpc.at_scale import many_workers


@pytest.fixture
def checked(monkeypatch) -> list[int]:
    """How many workers each of Dask's version checks compared with."""
    seen: list[int] = []
    original = versions.error_message

    def counting(scheduler, workers, source, source_name="Client"):
        seen.append(len(workers))
        return original(scheduler, workers, source, source_name=source_name)

    monkeypatch.setattr(versions, "error_message", counting)
    return seen


def other_numpy(monkeypatch) -> None:
    """Workers started from now on report another numpy than the scheduler's."""
    import distributed.worker

    mine = versions.get_versions()
    odd = {**mine, "packages": {**mine["packages"], "numpy": "0.0.1"}}
    monkeypatch.setattr(distributed.worker, "get_versions", lambda: odd)


def test_the_version_check_compares_each_distinct_set_of_versions_once(
    checked, monkeypatch, caplog
) -> None:
    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            distinct = many_workers.install(scheduler)
            same = [Worker(scheduler.address, nthreads=1, host="127.0.0.1") for _ in range(4)]
            await asyncio.gather(*same)
            assert checked == [1, 1, 1, 1]  # each join: one connected worker's versions
            assert distinct.key_of.keys() == scheduler.workers.keys()
            assert len(list(scheduler.workers.items())) == 4  # everyone else sees all
            with monkeypatch.context() as m:
                other_numpy(m)
                odd = await Worker(scheduler.address, nthreads=1, host="127.0.0.1")
            assert checked[-1] == 2  # two distinct sets now: the warning is Dask's own
            with pytest.warns(versions.VersionMismatchWarning, match="0.0.1"):  # Dask's own
                async with Client(scheduler.address, asynchronous=True) as client:
                    assert checked[-1] == 2  # a client's check too
                    assert len((await client.scheduler.identity())["workers"]) == 5
            await odd.close()
            await asyncio.gather(*(w.close() for w in same[:2]))
            while len(scheduler.workers) > 2:
                await asyncio.sleep(0.01)
            assert distinct.key_of.keys() == scheduler.workers.keys()
            await asyncio.gather(*(w.close() for w in same[2:]))

    # caplog's handler is on the root logger, which another test in the same pytest process
    # may have cut "distributed" off from (Dask's logging set up again: propagate off); a
    # handler on the logger itself sees its records either way.
    logger = logging.getLogger("distributed.worker")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level("WARNING", logger="distributed.worker"):
            asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        logger.removeHandler(caplog.handler)
    assert any("numpy" in r.getMessage() and "0.0.1" in r.getMessage() for r in caplog.records)


def test_the_workers_mapping_is_dasks_sorted_dict_everywhere_else() -> None:
    workers = many_workers.Workers()
    workers.distinct = many_workers._DistinctVersions()
    for name in ("c", "a", "b"):
        workers[name] = None
    assert list(workers.items()) == [("a", None), ("b", None), ("c", None)]
    assert list(workers) == ["a", "b", "c"] and workers.items()[0] == ("a", None)


def test_groups_are_caught_up_when_the_hooks_missed_workers() -> None:
    from types import SimpleNamespace

    distinct = many_workers._DistinctVersions()
    workers = many_workers.Workers()
    mine = versions.get_versions()
    for i in range(3):
        workers[f"w{i}"] = SimpleNamespace(versions=mine)
    workers["none"] = SimpleNamespace(versions=None)  # sent none: Dask's "UNKNOWN", apart
    assert [w for w, _ in distinct.representatives(workers)] == ["none", "w0"]
    del workers["w0"]
    assert [w for w, _ in distinct.representatives(workers)] == ["none", "w1"]


def test_the_scheduler_freezes_its_objects_as_the_cluster_grows(monkeypatch) -> None:
    """A full garbage collection walks what was made since the last tenth of the workers."""
    import gc
    from types import SimpleNamespace

    from dask_hpc.at_scale.many_workers import _LongLivedOutOfGC

    freezes: list[int] = []
    scheduler = SimpleNamespace(workers={}, tasks={})
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(len(scheduler.workers)))
    collected: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda: collected.append(len(scheduler.workers)))
    thresholds: list[tuple[int, ...]] = []
    monkeypatch.setattr(gc, "set_threshold", lambda *t: thresholds.append(t))
    plugin = _LongLivedOutOfGC()
    # Young collections after 50,000 objects, not 700; the older generations' thresholds kept.
    assert thresholds == [(50_000, *gc.get_threshold()[1:])]
    for i in range(10_000):
        scheduler.workers[f"w{i}"] = None
        plugin.add_worker(scheduler, f"w{i}")
    assert freezes[:3] == [0, 64, 71]  # Dask's modules, then each tenth more
    assert all(b >= a * 1.1 for a, b in zip(freezes[1:], freezes[2:], strict=False))
    assert 45 <= len(freezes) <= 60, len(freezes)  # O(log W), not a freeze per worker
    assert collected == freezes[1:]  # each right after a collection: no cyclic garbage kept
    # A computation's tasks are never frozen: workers that join while it runs freeze nothing.
    freezes.clear()
    scheduler.tasks["a-task"] = None
    for i in range(10_000, 20_000):
        scheduler.workers[f"w{i}"] = None
        plugin.add_worker(scheduler, f"w{i}")
    assert freezes == []
    del scheduler.tasks["a-task"]
    plugin.add_worker(scheduler, "w19999")
    assert freezes == [20_000]


def test_an_idle_scheduler_freezes_once_in_a_while_but_not_while_it_has_tasks(
    monkeypatch,
) -> None:
    """What heartbeats make (every worker's new metrics) is frozen while the cluster idles."""
    import gc

    from dask_hpc.at_scale.many_workers import _LongLivedOutOfGC

    monkeypatch.setattr(_LongLivedOutOfGC, "idle_every", 0.05)
    freezes: list[bool] = []

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            monkeypatch.setattr(gc, "freeze", lambda: freezes.append(bool(scheduler.tasks)))
            many_workers.install(scheduler)  # (in start-cluster before the scheduler starts)
            plugin = scheduler.plugins[_LongLivedOutOfGC.name]
            await plugin.start(scheduler)
            while len(freezes) < 2:
                await asyncio.sleep(0.01)
            scheduler.tasks["a-task"] = None  # a computation: nothing is frozen meanwhile
            seen = len(freezes)
            await asyncio.sleep(0.3)
            assert len(freezes) == seen
            del scheduler.tasks["a-task"]

    before = gc.get_threshold()
    asyncio.run(asyncio.wait_for(run(), 60))
    assert freezes and not any(freezes)
    assert gc.get_threshold() == before  # put back when the scheduler closed



SQUARES = sum(i * i for i in range(400))


def sum_on_40_workers(monkeypatch, patch, saturation: float | None = None) -> int:  # type: ignore[no-untyped-def]
    """The sum of 400 squares (root tasks: more than twice the threads) on a real scheduler
    with ``many_workers`` installed and 40 one-thread workers; ``await patch(scheduler,
    client)`` runs once they are connected, and ``monkeypatch`` is undone before they close."""
    import dask

    config = {} if saturation is None else {"distributed.scheduler.worker-saturation": saturation}

    async def run() -> int:
        with dask.config.set(config):
            async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
                many_workers.install(scheduler)
                workers = [Worker(scheduler.address, nthreads=1, host="127.0.0.1")
                           for _ in range(40)]  # fmt: skip
                await asyncio.gather(*workers)
                async with Client(scheduler.address, asynchronous=True) as client:
                    await patch(scheduler, client)
                    futures = client.map(lambda i: i * i, range(400), pure=False)
                    total = await client.submit(sum, futures)
                    monkeypatch.undo()
                await asyncio.gather(*(w.close() for w in workers))
                return total

    return asyncio.run(asyncio.wait_for(run(), 120))


def test_root_tasks_without_queuing_stop_at_the_first_unbeatable_idle_worker(monkeypatch) -> None:
    """``worker-saturation: inf``: Dask picks a worker for each share of a root task group by a
    min over every idle worker (O(W) per pick, O(W^2) per group); ``IdleWorkers`` hands ``min``
    the workers up to the first one nothing can beat. Real scheduler, 40 workers, the first two
    in Dask's order holding data (not the least): every pick is the one Dask's min over all
    idle workers gives, a pick costs a few objectives instead of up to 40, the result is right."""
    from sortedcontainers import SortedDict

    seen = {"calls": 0, "picks": 0, "wrong": []}

    async def patch(scheduler, client) -> None:  # type: ignore[no-untyped-def]
        holders = sorted(scheduler.workers)[:2]
        await client.gather([client.submit(bytes, 1000, workers=[a], pure=False)
                             for a in holders])  # fmt: skip
        objective = scheduler.worker_objective
        decide = scheduler.decide_worker_rootish_queuing_disabled

        def counting(ts, ws):  # type: ignore[no-untyped-def]
            seen["calls"] += 1
            return objective(ts, ws)

        def checked(ts):  # type: ignore[no-untyped-def]
            lws, group = ts.group.last_worker, ts.group
            reuse = (lws and group.last_worker_tasks_left
                     and scheduler.workers.get(lws.address) is lws)  # fmt: skip
            pool = list(SortedDict.values(scheduler.idle)) or scheduler.running
            dasks = min(pool, key=lambda ws: objective(ts, ws))
            ws = decide(ts)
            if not reuse:
                seen["picks"] += 1
                if ws is not dasks:
                    seen["wrong"].append((ws, dasks))
            return ws

        monkeypatch.setattr(scheduler, "worker_objective", counting)
        monkeypatch.setattr(scheduler, "decide_worker_rootish_queuing_disabled", checked)

    assert sum_on_40_workers(monkeypatch, patch, saturation=float("inf")) == SQUARES
    assert seen["wrong"] == []
    assert seen["picks"] >= 30  # 400 tasks in shares of 10 over 40 workers
    assert seen["calls"] <= 8 * seen["picks"], seen  # Dask alone: up to 40 per pick


def test_root_tasks_with_queuing_get_a_least_loaded_worker_without_a_scan(monkeypatch) -> None:
    """Queuing (Dask's default): Dask picks a worker for each root-ish task by a min over every
    free worker (O(W) per task); ``IdleTaskCount`` keeps them by load and hands ``min`` one of
    the least loaded. Real scheduler, 40 one-thread workers (two slots each), 400 tasks
    (root-ish: more than twice the threads): every pick has the load Dask's min over all free
    workers gives, none is made by a scan, the result is right."""
    from distributed.scheduler import SchedulerState

    seen = {"least": 0, "picks": 0, "scanned": 0, "wrong": []}
    decide = SchedulerState.decide_worker_rootish_queuing_enabled
    least = many_workers.IdleTaskCount.least

    def load(ws):  # type: ignore[no-untyped-def]
        return len(ws.processing) / ws.nthreads

    def counting(self):  # type: ignore[no-untyped-def]
        seen["least"] += 1
        return least(self)

    def checked(self):  # type: ignore[no-untyped-def]
        free = list(set.__iter__(self.idle_task_count))
        dasks = min(free, key=load, default=None)
        ws = decide(self)  # Dask's own code: its min goes over IdleTaskCount
        seen["picks"] += ws is not None
        seen["scanned"] += len(free)
        if (ws is None) != (dasks is None) or ws and load(ws) != load(dasks):
            seen["wrong"].append((ws, dasks))
        return ws

    async def patch(scheduler, client) -> None:  # type: ignore[no-untyped-def]
        monkeypatch.setattr(many_workers.IdleTaskCount, "least", counting)
        monkeypatch.setattr(SchedulerState, "decide_worker_rootish_queuing_enabled", checked)

    assert sum_on_40_workers(monkeypatch, patch) == SQUARES
    assert seen["wrong"] == []
    assert seen["picks"] >= 400  # every task went through the queue's pick
    assert seen["least"] >= seen["picks"]  # each handed one worker: Dask's min saw...
    assert seen["scanned"] >= 5 * seen["picks"], seen  # ...every free worker, 5+ per pick


def test_free_workers_are_kept_by_load_as_their_tasks_change() -> None:
    """``IdleTaskCount``'s buckets follow Dask's adds and discards, and a load that changed
    unseen is noticed at the pick."""
    class Worker:  # what the pick reads of Dask's WorkerState; hashed by identity as it is
        def __init__(self, tasks: int, threads: int) -> None:
            self.processing, self.nthreads = dict.fromkeys(range(tasks)), threads

    def worker(tasks: int, threads: int = 1) -> Worker:
        return Worker(tasks, threads)

    free = many_workers.IdleTaskCount()
    assert free.least() is None
    a, b, c = worker(1), worker(1), worker(2, threads=4)
    for ws in (a, b, c):
        free.add(ws)
    assert free.least() is c  # 0.5 a thread
    c.processing.update(dict.fromkeys(range(2, 8)))  # 2 a thread, unseen by add
    assert free.least() is a  # the first of the two at 1
    a.processing.clear()
    free.add(a)  # as check_idle_saturated does after a task ends
    assert free.least() is a
    free.discard(a)
    assert free.least() is b
    free.remove(b)
    assert free.least() is c and len(free) == 1
    free.discard(c)
    assert free.least() is None and not free._by_load and not free._load_of
