"""at_scale.removals: the remaining workers told of removed workers together, with Dask's own
messages, where Dask's ``remove_worker`` goes over every remaining worker per removal."""

from __future__ import annotations

import asyncio

from distributed import Client, Scheduler, Worker

from dask_hpc.at_scale import many_workers, removals


async def _cluster(scheduler: Scheduler, n: int) -> tuple[list[Worker], dict[str, list[dict]]]:
    """n workers; what each hears of ``remove-worker``, by name, as its handler gets it."""
    workers = [Worker(scheduler.address, name=str(i), nthreads=1) for i in range(n)]
    await asyncio.gather(*workers)
    heard: dict[str, list[dict]] = {}
    for worker in workers:
        handler = worker.stream_handlers["remove-worker"]

        def hear(*args, _name=worker.name, _handler=handler, **kwargs):
            heard.setdefault(_name, []).append(kwargs)
            return _handler(*args, **kwargs)

        worker.stream_handlers["remove-worker"] = hear
    return workers, heard


async def _until(condition, what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.01)


def test_workers_whose_connections_break_are_told_to_the_others_with_dasks_messages() -> None:
    """Three workers' streams cut at the scheduler (a killed node's): Dask's cleanup removes
    each, and every remaining worker hears of all three, with Dask's stimulus ids; the
    bandwidth estimates of the pairs they were in are dropped; the cluster computes."""

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            many_workers.install(scheduler)
            workers, heard = await _cluster(scheduler, 5)
            try:
                await _break_three(scheduler, workers, heard)
            finally:
                await asyncio.gather(*(w.close() for w in workers))

    asyncio.run(asyncio.wait_for(run(), 60))


async def _break_three(scheduler: Scheduler, workers: list[Worker], heard: dict) -> None:
    gone = {w.address for w in workers if w.name in ("1", "2", "3")}
    for address in scheduler.workers:  # estimates Dask keeps per pair
        for other in gone:
            scheduler.bandwidth_workers[address, other] = 1e9
    for address in gone:
        scheduler.stream_comms[address].comm.abort()
    await _until(lambda: set(scheduler.workers).isdisjoint(gone), "removed")
    await scheduler.workers.told.told()
    await _until(lambda: all(len(heard.get(n, [])) == 3 for n in "04"), "told")
    for name in "04":
        assert {m["worker"] for m in heard[name]} == gone, heard
        assert all(m["stimulus_id"].startswith("handle-worker-cleanup-") for m in heard[name])
    assert not [p for p in scheduler.bandwidth_workers if set(p) & gone]
    async with Client(scheduler.address, asynchronous=True) as client:
        assert await client.submit(sum, [40, 2]) == 42


def test_workers_removed_in_one_turn_are_told_in_one_pass_over_the_others(monkeypatch) -> None:
    """Removals in one turn of the loop: one pass over the remaining workers for all of them
    (Dask: one per removal); a removal in a later turn, while that pass runs, gets its own."""
    passes: list[set[str]] = []
    tell = removals.tell_the_others

    async def recorded(scheduler, gone):
        passes.append(set(gone))
        await tell(scheduler, gone)

    monkeypatch.setattr(removals, "tell_the_others", recorded)

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            many_workers.install(scheduler)
            workers, heard = await _cluster(scheduler, 6)
            try:
                await _one_turn_then_another(scheduler, workers, heard, passes)
            finally:
                await asyncio.gather(*(w.close() for w in workers))

    asyncio.run(asyncio.wait_for(run(), 60))


async def _one_turn_then_another(
    scheduler: Scheduler, workers: list[Worker], heard: dict, passes: list[set[str]]
) -> None:
    first = [w.address for w in workers[1:4]]
    await asyncio.gather(
        *(scheduler.remove_worker(a, stimulus_id=f"test-{a}", close=True) for a in first)
    )
    await scheduler.remove_worker(workers[4].address, stimulus_id="test-4", close=True)
    await scheduler.workers.told.told()
    assert passes == [set(first), {workers[4].address}], passes
    await _until(lambda: all(len(heard.get(n, [])) == 4 for n in "05"), "told")
    for name in "05":
        stimuli = [m["stimulus_id"] for m in heard[name]]
        assert stimuli == [*(f"test-{a}" for a in first), "test-4"], heard


def test_nothing_is_told_once_the_cluster_ends() -> None:
    """When the cluster ends (``closing``), removals tell no one: every worker is closing."""

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            many_workers.install(scheduler)
            workers, heard = await _cluster(scheduler, 3)
            sent: list[dict] = []
            send_all = scheduler.send_all

            def recorded(client_msgs, worker_msgs):
                sent.extend(m for msgs in worker_msgs.values() for m in msgs)
                send_all(client_msgs, worker_msgs)

            scheduler.send_all = recorded
            try:
                scheduler.workers.ending = True
                await scheduler.remove_worker(workers[0].address, stimulus_id="end", close=True)
                await scheduler.workers.told.told()
                assert [m for m in sent if m.get("op") == "remove-worker"] == []
                assert heard == {}
            finally:
                await asyncio.gather(*(w.close() for w in workers))

    asyncio.run(asyncio.wait_for(run(), 60))


def test_the_removals_benchmark_prints_both_cases_and_the_messages_each_sends() -> None:
    """benchmarks/removals.py: a row per case, with the messages counted exactly: at the end
    Dask sends each worker's close and, per removal, one message to each remaining worker; the
    end of start-cluster's scheduler only the closes; a lost tenth, each remaining worker told
    of each lost one (Dask also tells the lost ones of the lost before them)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.removals", "--workers", "60"],
        cwd=repo, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()[2:]]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in rows] == [
        ("60", "end", "60"),
        ("60", "lost", "6"),
    ]
    counts = [(int(r[7].replace(",", "")), int(r[8].replace(",", ""))) for r in rows]
    assert counts[0] == (60 + 60 * 59 // 2, 60)
    assert counts[1] == (6 + sum(59 - k for k in range(6)), 6 + 54 * 6)
    for row in rows:
        assert float(row[3]) > 0 and float(row[4]) > 0
