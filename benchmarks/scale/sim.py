"""Simulated ranks for the scale benchmarks (``lifecycle``, ``faults``, ``stop``): many ranks to a
process.

Each simulated rank polls the real scheduler file with the real reader and the real jittered
intervals (``connection.poll_delays``), answers the real roll call (``roster.join``, then the
beats rank 0 asks for, ``roster.Beats``, and a ``given-up`` closes its workers) and starts
its workers as start-cluster's own worker class (``dask_hpc.running.worker.HpcWorker``) sharing the
process's event loop (no Nanny, profiling off, the system monitor every 10 s: the lightest
worker that still registers, heartbeats and is closed by the scheduler). It closes its
roll-call connection when its workers are closed, as a real rank exits.

Each rank has a loopback address of its own (``rank_host``), as a real node has its own: its
workers listen there and every connection it opens (roll call, scheduler, other workers) starts
from there. With every simulated worker on 127.0.0.1, 10,000 workers did not start: their
listeners and their connections to the one scheduler address drew on the same ~28,000
ephemeral ports (``OSError: [Errno 98] Address already in use``).

    python -m benchmarks.scale.sim --first R --count N ...   (started by ``launch.Launch``)
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextvars
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# What every simulated worker changes from Dask's defaults (they are not what is measured).
SIM_CONFIG = {
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    # The system monitor reads /proc for its process's CPU, memory and open files: 250 Workers
    # in one process each did so for all 250 (py-spy of a simulator during a computation at
    # 200 workers: 45% of its loop in psutil, most in num_fds). A real worker's monitor runs on
    # its own node; its readings only ride along in the heartbeats.
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "1h",
    "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork",
    # A worker's own periodic checks, which a real worker runs on its own node: the event-loop
    # tick (every 20 ms) and the memory monitor (every 100 ms) cost 250 Workers sharing a loop
    # 15,000 callbacks a second, on the cores rank 0 is measured on. No message to the
    # scheduler comes from either.
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    "DASK_DISTRIBUTED__ADMIN__TICK__LIMIT": "1h",
    "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__SPILL": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "False",
}
RANKS_PER_SIM = 250  # simulated ranks per process


def rank_env(rank: int, size: int, job: str) -> dict[str, str]:
    """Open MPI's variables for ``rank`` of ``size``, one rank per (emulated) node."""
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        "OMPI_MCA_ess_base_jobid": job,
    }


def rank_host(rank: int) -> str:
    """Rank ``rank``'s own loopback address: 127.1.0.0 + rank (up to 8 million ranks; rank 0,
    the real start-cluster, stays on 127.0.0.1)."""
    return f"127.{1 + rank // 65536}.{(rank // 256) % 256}.{rank % 256}"


class InlineExecutor(concurrent.futures.Executor):
    """Runs a simulated worker's task at once, on the event loop's thread.

    Each of Dask's Workers has a thread pool; 250 Workers in a process have 250 threads that,
    during a computation, all want the process's one GIL together with the event loop serving
    them (at 1,000 workers the load average counted ~1,000 runnable threads, and the loop
    waited its turn for each task's result). A real worker's thread hop happens on its own
    node. The benchmark's tasks take microseconds, so running them inline costs the loop
    nothing; the scheduler sees the same task results and messages.
    """

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - the task's, reported as Dask does
            future.set_exception(error)
        return future


# The thread that does what each rank's own process does (see sim_main).
RANK_PROCESSES: list[RankProcesses] = []
# Every worker of this process's ranks, for SIGTERM (see sim_main); whether it came.
ALL_WORKERS: list = []
TERMINATED: list[bool] = []

# The address the current simulated rank connects from (each rank's coroutine, and every task
# and callback it starts, runs in a context of its own).
_SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_source", default=None)


def connect_from_rank_address() -> None:
    """Have every connection the workers open start from their rank's address.

    Dask's connectors call tornado's ``TCPClient.connect`` without a source address, so the
    kernel would pick 127.0.0.1 and a port from the shared ephemeral range.
    """
    from tornado.tcpclient import TCPClient

    connect = TCPClient.connect

    async def from_rank(self, host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        source = _SOURCE.get()
        if source is not None and kwargs.get("source_ip") is None:
            kwargs["source_ip"] = source
        return await connect(self, host, port, *args, **kwargs)

    TCPClient.connect = from_rank  # type: ignore[method-assign]


async def sim_rank(rank: int, args: argparse.Namespace, stats: dict, beat: Callable) -> None:
    from distributed.security import Security

    from dask_hpc.guard import connection
    from dask_hpc.planning import launchers
    from dask_hpc.running import roster
    from dask_hpc.running.worker import HpcWorker

    class Worker(HpcWorker):
        """start-cluster's worker, telling the simulator when its first heartbeat is done."""

        beaten = False

        async def heartbeat(self) -> None:
            await super().heartbeat()
            if not self.beaten:
                self.beaten = True
                beat()

    host = rank_host(rank)
    _SOURCE.set(host)  # this rank's tasks, and those they start, connect from its address
    env = rank_env(rank, args.size, args.job)
    info_rank = launchers.detect(env, None, pid=os.getpid(), host=f"node{rank}")
    path = Path(args.scheduler_file)
    delays = connection.poll_delays(args.poll_interval, args.poll_max_interval)
    while True:
        stats["reads"] += 1
        info = connection.read_scheduler_file(path, info_rank.launch_id)
        if info is not None:
            break
        if TERMINATED:
            return
        await asyncio.sleep(next(delays))
    stats["found"] = max(stats["found"], time.time())
    conn = roster.join(info.roster, info.token, rank, 60, source=host)
    workers: list = []
    RANK_PROCESSES[0].add(conn, workers)
    tls = info.tls
    security = Security(
        tls_ca_file=str(tls.ca),
        tls_worker_cert=str(tls.cert),
        tls_worker_key=str(tls.key),
        require_encryption=True,
    )
    for i in range(args.per_rank):
        name = f"{rank}-{i}" if args.per_rank > 1 else str(rank)
        stats["last_start"] = max(stats["last_start"], time.time())
        workers.append(
            Worker(
                info.address,
                name=name,
                nthreads=1,
                memory_limit="1GiB",
                security=security,
                local_directory=f"{args.local}/{rank}",
                dashboard=False,
                host=host,
                protocol="tls",
                death_timeout=args.death_timeout,
                **({} if args.task_threads else {"executor": InlineExecutor()}),
            )
        )
    ALL_WORKERS.extend(workers)
    if TERMINATED:  # the signal came while they were made
        for worker in workers:
            asyncio.ensure_future(worker.close(reason="start-cluster-signal"))
    # Dask adds a log handler per Worker object to the "distributed.worker" logger: with 250
    # Workers in one process every record would reach 250 handlers (O(W^2) per process, which a
    # real worker, alone in its process, does not pay). Measured at 1,000 workers: 761 heartbeat
    # errors logged while the workers closed cost the simulators 3.9 s of CPU.
    for worker in workers:
        logging.getLogger("distributed.worker").removeHandler(worker._deque_handler)
    await asyncio.gather(*workers)
    # 250 Workers in one process make a heap 250 times a real worker's, and each of Python's
    # full garbage collections walks all of it: measured at 1,000 workers, 4-5 s of CPU per
    # simulator (10 full collections), taken from the 2 cores rank 0 is measured on. Objects
    # of a started worker are moved out of the collector's way, as the zygote does for real
    # workers (gc.freeze: O(1)).
    gc.freeze()
    await asyncio.gather(*(w.finished() for w in workers))
    RANK_PROCESSES[0].remove(conn)
    conn.close()  # this rank "exits": rank 0's roll call sees it go


class RankProcesses(threading.Thread):
    """What each simulated rank's own process does on the roll call (``worker_rank``), for every
    rank of this simulator, in a thread of its own: answer rank 0's ticks, and, given up as
    hung, have the rank's workers closed (on the event loop).

    A thread, not the event loop: a real rank's process is not its workers' and never waits
    for them. On the simulators' event loop, which 250 workers share with ~40 other busy
    processes on one core, the answers waited behind the workers' TLS handshakes: at 10,000
    workers rank 0 gave simulated ranks up as hung while they started.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(daemon=True)
        import selectors

        from dask_hpc.running import roster

        self.roster, self.loop = roster, loop
        self.selector = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.ranks: dict = {}  # fd -> (conn, what rank 0 said, workers)
        self.done = threading.Event()

    def add(self, conn, workers: list) -> None:  # type: ignore[no-untyped-def]
        with self.lock:
            self.ranks[conn.fileno()] = (conn, self.roster.FromRank0(), workers)
            self.selector.register(conn.fileno(), 1)

    def remove(self, conn) -> None:  # type: ignore[no-untyped-def]
        with self.lock:
            if self.ranks.pop(conn.fileno(), None) is not None:
                self.selector.unregister(conn.fileno())

    def run(self) -> None:
        while not self.done.is_set():
            with self.lock:
                for key, _ in self.selector.select(0) if self.ranks else []:
                    self._read(key.fd)
            self.done.wait(0.1)  # a rank's loop turn (ticks are seconds apart)

    def _read(self, fd: int) -> None:
        conn, said, workers = self.ranks[fd]
        try:
            data = conn.recv(256)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # rank 0 closed it (it ends, or gave this rank up): as a real rank
            self.selector.unregister(fd)  # (worker_rank), what the scheduler did not close stops
            del self.ranks[fd]
            self.loop.call_soon_threadsafe(drop_scheduler_streams, workers)
            self._close(workers, "start-cluster-signal")
            return
        given_up, stop = said.given_up, said.stop
        said.feed(data)
        self.roster.answer(fd, said)
        if said.given_up is not None and given_up is None:
            self._close(workers, "dask-hpc-given-up")
        elif said.stop and not stop:  # the cluster ends
            self._close(workers, "start-cluster-signal")

    def _close(self, workers: list, reason: str) -> None:
        """Close the rank's workers (on the event loop; Dask's close of a closed or closing
        worker waits for it). Before, a simulated rank left its workers to Dask's death timeout
        when rank 0 ended without the scheduler closing them (1,004 s at 10,000 workers): after
        a hang at 10,000 the simulators had not all exited 35 minutes after the job's end."""
        for worker in workers:
            self.loop.call_soon_threadsafe(asyncio.ensure_future, worker.close(reason=reason))


def drop_scheduler_streams(workers: list) -> None:
    """Abort each worker's stream from the scheduler, with what is unread in it, as the kernel
    does when a real rank's process ends. What is unread there once rank 0 is gone is mostly
    Dask's ``remove-worker``, one per removed worker to every remaining one: a real worker
    reads its own, a simulator all 250 workers' (a kill at 10,000: 6 minutes after rank 0's end,
    every simulator was still decoding them)."""
    for worker in workers:
        comm = getattr(worker.batched_stream, "comm", None)
        if comm is not None and not comm.closed():
            comm.abort()


TIDY_EVERY = 30.0  # s between a simulator's collect-and-freeze (see sim_main)


async def collect_and_freeze() -> None:
    """Every ``TIDY_EVERY`` s: a full collection, then freeze what is left (none of it garbage).

    A simulator holds 250 Workers' objects, and Python's collections walked them all: py-spy of
    a simulator during a 100,000-task computation at 1,000 workers found 65% of its loop in
    the garbage collector (a real worker's heap is 1/250 of this). Young collections come 140
    times less often (``gc.set_threshold`` in ``sim_main``); what survives is frozen here.
    """
    while True:
        await asyncio.sleep(TIDY_EVERY)
        gc.collect()
        gc.freeze()


async def sim_main(args: argparse.Namespace) -> int:
    gc.freeze()  # Dask's modules: see sim_rank
    gc.set_threshold(100_000, 50, 50)
    tidy = asyncio.ensure_future(collect_and_freeze())
    connect_from_rank_address()
    stats = {"reads": 0, "found": 0.0, "last_start": 0.0, "first_poll": time.time(), "beats": 0}

    def terminate() -> None:  # as a rank told SIGTERM by the batch system: close its workers
        TERMINATED.append(True)
        for worker in ALL_WORKERS:
            asyncio.ensure_future(worker.close(reason="start-cluster-signal"))

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminate)
    RANK_PROCESSES.append(RankProcesses(asyncio.get_running_loop()))
    RANK_PROCESSES[0].start()
    ranks = range(args.first, args.first + args.count)

    def beat() -> None:  # every worker of this simulator has sent a heartbeat: tell the job
        stats["beats"] += 1
        if stats["beats"] == args.count * args.per_rank:
            stats["settled"] = time.time()
            Path(args.settled_dir, str(args.first)).touch()

    async def rank_saying_why(rank: int) -> None:  # a rank that fails says so at once
        try:
            await sim_rank(rank, args, stats, beat)
        except BaseException as error:
            print(f"simulated rank {rank} failed: {error!r}", file=sys.stderr, flush=True)
            raise

    results = await asyncio.gather(*(rank_saying_why(r) for r in ranks), return_exceptions=True)
    tidy.cancel()
    stats["errors"] = [repr(r) for r in results if isinstance(r, BaseException)][:5]
    Path(args.out).write_text(json.dumps(stats))
    return 1 if stats["errors"] else 0


def main() -> int:
    p = argparse.ArgumentParser()
    for name in ("first", "count", "size", "per-rank"):
        p.add_argument(f"--{name}", type=int, required=True)
    for name in ("poll-interval", "poll-max-interval", "death-timeout"):
        p.add_argument(f"--{name}", type=float, required=True)
    for name in ("job", "scheduler-file", "local", "out", "settled-dir"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--task-threads", action="store_true", help="tasks in Dask's thread pools")
    sys.path.insert(0, str(SRC))
    return asyncio.run(sim_main(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
