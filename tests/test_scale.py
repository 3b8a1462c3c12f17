"""Cluster size: the open-file limit rank 0 needs, and Aurora's CPU layout on two nodes."""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.mpi import mpich_nodes
from support import TESTS, start_cluster

from dask_hpc.scaling import FDS_BASE

MEMORY_JOB = TESTS / "jobs" / "memory_job.py"
LIMITS = [
    sys.executable,
    "-c",
    "import resource; print(*resource.getrlimit(resource.RLIMIT_NOFILE))",
]


@pytest.fixture(autouse=True)
def _no_filter_left_by_close_workers():
    """close_workers quiets a logger for the rest of the scheduler's process: here, the tests'."""
    yield
    logger = logging.getLogger("distributed.comm.tcp")
    for drop in [f for f in logger.filters if type(f).__name__ == "_HandshakesCutShort"]:
        logger.removeFilter(drop)


@contextlib.contextmanager
def messages_shown(logger_name: str) -> Iterator[list[str]]:
    """The warnings and errors of a logger that reach its handlers (its filters passed them)."""
    shown: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: shown.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield shown
    finally:
        logger.removeHandler(handler)


def limited(soft: int, hard: int | None, argv: list[str]) -> list[str]:
    """``argv`` run under the given open-file limits (set by the shell, as a batch job's are)."""
    cmd = " ".join(map(shlex.quote, argv))
    hard_too = f" && ulimit -Hn {hard}" if hard else ""
    return ["sh", "-c", f"ulimit -Sn {soft}{hard_too} && exec {cmd}"]


def test_rank_raises_its_open_file_limit(run_cmd, cluster_env) -> None:
    argv = [*start_cluster(), "cpu", "1", "--", *LIMITS]
    result = run_cmd(limited(256, None, argv), env=cluster_env, timeout=90)
    assert result.returncode == 0, result.stderr
    soft, hard = map(int, result.stdout.split()[-2:])
    assert soft >= FDS_BASE > 256  # COMMAND inherits the rank's raised soft limit
    assert "open-file" not in result.stderr


def test_hard_limit_too_low_is_one_line_and_the_cluster_still_runs(run_cmd, cluster_env) -> None:
    argv = [*start_cluster(), "cpu", "1", "--", *LIMITS]
    result = run_cmd(limited(200, 300, argv), env=cluster_env, timeout=90)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["300", "300"]  # raised as far as the hard limit allows
    lines = [line for line in result.stderr.splitlines() if "open-file hard limit" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("start-cluster: warning: the open-file hard limit (300, ulimit -Hn)")
    assert "Traceback" not in result.stderr


@pytest.mark.timeout(900)
def test_aurora_cpu_layout_104_workers_on_each_of_two_nodes(
    run_cmd, cluster_env, tmp_path: Path
) -> None:
    """One rank per node starting 104 workers (`start-cluster cpu 104`), two emulated nodes.

    On this 2-core machine that is 104x oversubscribed: it checks that the derived timeouts
    let such a start finish, and what each forked worker costs.
    """
    argv = [
        *mpich_nodes(2, 1),
        *start_cluster(),
        "cpu",
        "104",
        "--nthreads",
        "1",
        "--memory-limit",
        "256MiB",
        "--interface",
        "lo",
        "--dashboard-address",
        "127.0.0.1:0",
        "--local-directory",
        str(tmp_path / "local"),
        "--",
        sys.executable,
        str(MEMORY_JOB),
    ]
    env = {**cluster_env, "DASK_HPC__TIMEOUT": "600"}
    result = run_cmd(argv, env=env, timeout=700)
    assert result.returncode == 0, result.stderr[-5000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("MEMORY "))
    out = json.loads(line[len("MEMORY ") :])
    assert out["workers"] == 208 and out["sum"] == sum(range(1, 209))
    uss = statistics.median(m["uss"] for m in out["memory"]) / 2**20
    pss = statistics.median(m["pss"] for m in out["memory"]) / 2**20
    hosts = [m["uss"] / 2**20 for m in out["nanny_hosts"]]
    print(
        f"208 workers: median USS {uss:.0f} MiB, PSS {pss:.0f} MiB per worker process; "
        f"nanny hosts USS {', '.join(f'{h:.0f}' for h in hosts)} MiB (104 Nannies each)"
    )
    assert uss < 128  # 104 per node: ~13 GiB of an Aurora node's 1 TiB
    progress = [x for x in result.stderr.splitlines() if "connected" in x and "workers " in x]
    assert len(progress) < 208 // 2, progress  # rate-limited, not a line per worker


def test_version_check_compares_each_distinct_set_once(monkeypatch) -> None:
    from distributed import versions

    from dask_hpc.processes import compare_distinct_versions

    original = versions.error_message
    monkeypatch.setattr(versions, "error_message", original)
    seen: list[int] = []

    def counting(scheduler, workers, source, source_name="Client"):
        seen.append(len(workers))
        return original(scheduler, workers, source, source_name=source_name)

    monkeypatch.setattr(versions, "error_message", counting)
    compare_distinct_versions()
    mine = versions.get_versions()
    other = {"packages": {**mine["packages"], "numpy": "0.0.1"}}
    workers = {f"w{i}": mine for i in range(1000)}
    assert versions.error_message(mine, workers, mine) == original(mine, workers, mine)
    workers["odd"] = other  # one worker with another numpy: the warning is still there
    assert "numpy" in versions.error_message(mine, workers, mine)["warning"]
    assert seen == [1, 2]  # 1,001 workers, two distinct sets of versions
    del workers["odd"]  # it left: the warning goes with it
    assert versions.error_message(mine, workers, mine) == original(mine, workers, mine)
    workers["none"] = None  # a worker that sent no versions: Dask's "UNKNOWN", kept apart
    assert versions.error_message(mine, workers, mine) == original(mine, workers, mine)
    assert seen == [1, 2, 1, 2]


def test_version_groups_follow_the_schedulers_workers_without_a_scan(monkeypatch) -> None:
    """With a real scheduler and workers the groups are kept by its add/remove hooks: a join's
    version check does not go over every connected worker (O(W) per join, O(W^2) a start)."""
    import asyncio

    from distributed import Scheduler, Worker, versions

    from dask_hpc.processes import compare_distinct_versions

    monkeypatch.setattr(versions, "error_message", versions.error_message)
    distinct = compare_distinct_versions()

    class Unscannable(dict):
        def keys(self):
            raise AssertionError("the version check went over every worker")

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", dashboard_address=":0") as scheduler:
            scheduler.add_plugin(distinct)
            workers = [Worker(scheduler.address, nthreads=1, host="127.0.0.1") for _ in range(3)]
            await asyncio.gather(*workers)
            try:
                assert distinct.key_of.keys() == scheduler.workers.keys()
                current = Unscannable({w: ws.versions for w, ws in scheduler.workers.items()})
                assert len(distinct.representatives(current)) == 1  # same versions: 1 of 3
                mine = versions.get_versions()
                other = {"packages": {**mine["packages"], "numpy": "0.0.1"}}
                assert "numpy" in versions.error_message(mine, current, other)["warning"]
                await workers[0].close()
                while len(scheduler.workers) > 2:
                    await asyncio.sleep(0.01)
                assert distinct.key_of.keys() == scheduler.workers.keys()
            finally:
                await asyncio.gather(*(w.close() for w in workers))

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_cluster_shutdown_does_not_tell_each_leaving_worker_about_every_other() -> None:
    """Dask's remove_worker sends every remaining worker a message about each one that left
    (O(W^2)); close_workers, the end of a cluster, does not: real scheduler and workers."""
    import asyncio

    from distributed import Scheduler, Worker

    from dask_hpc.processes import close_workers

    async def remove_worker_messages(close) -> int:
        sent = []
        async with Scheduler(host="127.0.0.1", dashboard_address=":0") as scheduler:
            workers = [Worker(scheduler.address, nthreads=1, host="127.0.0.1") for _ in range(4)]
            await asyncio.gather(*workers)
            for stream in scheduler.stream_comms.values():
                send = stream.send
                stream.send = lambda *msgs, send=send: (
                    sent.extend(m for m in msgs if m.get("op") == "remove-worker"),
                    send(*msgs),
                )
            close(scheduler)
            await asyncio.wait_for(asyncio.gather(*(w.finished() for w in workers)), 30)
            async def all_removed() -> None:
                while scheduler.workers:
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(all_removed(), 30)
        return len(sent)

    def one_by_one(scheduler) -> None:  # what Dask does without close_workers
        for address in list(scheduler.workers):
            scheduler.close_worker(address)

    assert asyncio.run(remove_worker_messages(one_by_one)) == 3 + 2 + 1  # the test sees them
    assert asyncio.run(remove_worker_messages(close_workers)) == 0


def test_a_heartbeat_cut_short_by_its_workers_close_is_not_an_error() -> None:
    """At scale many heartbeats are in flight when the workers close (benchmarks/scale.py)."""
    import asyncio

    from distributed import Scheduler, Worker

    from dask_hpc.worker import HpcWorker

    async def heartbeat_errors_at_close(cls: type[Worker]) -> list[str]:
        with messages_shown("distributed.worker") as shown:
            async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
                worker = await cls(scheduler.address, nthreads=1, host="127.0.0.1")
                arrived = asyncio.Event()

                async def stuck_heartbeat(**kwargs) -> None:  # the scheduler never answers
                    arrived.set()
                    await asyncio.Event().wait()

                scheduler.handlers["heartbeat_worker"] = stuck_heartbeat
                beat = asyncio.ensure_future(worker.heartbeat())
                await asyncio.wait_for(arrived.wait(), 30)
                await asyncio.wait_for(worker.close(), 30)
                await asyncio.wait_for(beat, 30)
        return [m for m in shown if "heartbeat" in m]

    # The test forces the case: Dask's own Worker logs it ...
    assert asyncio.run(heartbeat_errors_at_close(Worker)) == [
        "Failed to communicate with scheduler during heartbeat."
    ]
    # ... start-cluster's does not.
    assert asyncio.run(heartbeat_errors_at_close(HpcWorker)) == []


def test_a_running_workers_failed_heartbeat_is_still_reported() -> None:
    import asyncio

    from distributed import Scheduler

    from dask_hpc.worker import HpcWorker

    async def heartbeat_errors_while_running() -> list[str]:
        with messages_shown("distributed.worker") as shown:
            async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
                async with HpcWorker(scheduler.address, nthreads=1, host="127.0.0.1") as worker:

                    async def broken_heartbeat(**kwargs) -> None:
                        raise OSError("the scheduler's network is gone")

                    worker.scheduler.heartbeat_worker = broken_heartbeat
                    await asyncio.wait_for(worker.heartbeat(), 30)
        return [m for m in shown if "heartbeat" in m]

    assert asyncio.run(heartbeat_errors_while_running()) == [
        "Failed to communicate with scheduler during heartbeat."
    ]


def test_a_cluster_shutdown_does_not_warn_of_handshakes_that_closing_workers_break_off(
    tmp_path, monkeypatch
) -> None:
    import asyncio

    from distributed import Scheduler
    from distributed.security import Security

    from dask_hpc import security
    from dask_hpc.processes import close_workers

    files = security.create(tmp_path, "test")
    tls = Security(
        tls_ca_file=str(files.ca),
        tls_scheduler_cert=str(files.cert),
        tls_scheduler_key=str(files.key),
        require_encryption=True,
    )
    logger = logging.getLogger("distributed.comm.tcp")
    logged: list[str] = []  # what Dask logged, before any filter
    handle = logger.handle
    monkeypatch.setattr(logger, "handle", lambda r: (logged.append(r.getMessage()), handle(r)))

    async def a_broken_handshake(ending: bool) -> None:
        async with Scheduler(
            host="127.0.0.1", port=0, dashboard_address=":0", protocol="tls", security=tls
        ) as scheduler:
            if ending:
                close_workers(scheduler)
            host, port = scheduler.address.removeprefix("tls://").rsplit(":", 1)
            seen = len(logged)
            _, writer = await asyncio.open_connection(host, int(port))
            writer.close()  # before any TLS hello, as a worker that closes mid-connect
            while not any("TLS handshake failed" in m for m in logged[seen:]):
                await asyncio.sleep(0.01)  # the listener's warning, bounded by wait_for

    with messages_shown("distributed.comm.tcp") as shown:
        asyncio.run(asyncio.wait_for(a_broken_handshake(ending=False), 30))
        assert sum("TLS handshake failed" in m for m in shown) == 1  # Dask warns while it runs
        asyncio.run(asyncio.wait_for(a_broken_handshake(ending=True), 30))
    assert sum("TLS handshake failed" in m for m in logged) == 2
    assert sum("TLS handshake failed" in m for m in shown) == 1  # not once it ends


def test_the_scheduler_freezes_its_objects_as_the_cluster_grows(monkeypatch) -> None:
    """A full garbage collection walks what was made since the last tenth of the workers."""
    import gc
    from types import SimpleNamespace

    from dask_hpc.processes import _LongLivedOutOfGC

    freezes: list[int] = []
    scheduler = SimpleNamespace(workers={}, tasks={})
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(len(scheduler.workers)))
    plugin = _LongLivedOutOfGC()
    for i in range(10_000):
        scheduler.workers[f"w{i}"] = None
        plugin.add_worker(scheduler, f"w{i}")
    assert freezes[:3] == [0, 64, 71]  # Dask's modules, then each tenth more
    assert all(b >= a * 1.1 for a, b in zip(freezes[1:], freezes[2:], strict=False))
    assert 45 <= len(freezes) <= 60, len(freezes)  # O(log W), not a freeze per worker
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


def test_the_scale_benchmark_runs_and_prints_its_table(run_cmd, cluster_env) -> None:
    """benchmarks/scale.py (docs/scale.md) at two small sizes: its table, its scheduler probe's
    rows, and the goal of a flat cost per worker against a lone rank 0 (not timed here)."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "scale.py"
    result = run_cmd([sys.executable, str(bench), "--workers", "10", "30"], env=cluster_env,
                     timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows: dict[str, list[str]] = {}  # the first table's rows (the fits' table repeats labels)
    for line in result.stdout.splitlines():
        if line.startswith("| "):
            label, *cells = (cell.strip() for cell in line.strip().strip("|").split("|"))
            rows.setdefault(label, cells)
    assert rows["W (= ranks x per rank)"] == ["10", "30"]
    assert float(rows["scheduler loop CPU per worker: first to last join (ms)"][1]) > 0
    assert rows["rank 0 open fds"]
    assert any(key.startswith("rank 0 CPU per worker beyond a lone rank 0's") for key in rows)
