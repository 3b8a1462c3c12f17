"""This rank's workers under Dask's own Nanny, as ``dask worker --nworkers N`` runs them.

The rank forks one process (the *nanny host*) that holds a ``distributed.Nanny`` per worker,
or, for NVIDIA GPUs, dask-cuda's ``CUDAWorker``, which builds those Nannies as
``dask cuda worker`` does. Restarts, ``client.restart()``, ``restart_workers``,
``retire_workers``, NannyPlugins, ``run(nanny=True)`` and memory termination are Dask's own.

Each Nanny starts its worker process from multiprocessing's forkserver
(``distributed.worker.multiprocessing-method: forkserver``): a single-threaded fork of the
nanny host made once the host imported Dask (``forked_mp``), so a worker (or its restart)
costs a fork, not an interpreter start, and nothing is forked from a process that runs
threads or TLS connections.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import distributed.utils
from distributed import Nanny
from distributed.core import Status

from ..at_scale import event_loop, log_summary
from ..errors import say
from ..planning.plan import ProcessSpec, shared_env
from . import semaphore_names
from .children import EXIT_CLOSED, EXIT_FAILED, EXIT_SCHEDULER_LOST
from .worker import (
    LOST_SCHEDULER_REASONS,
    closing_for_good,
    quiet_stderr,
    worker_class,
    worker_kwargs,
)

# A worker whose process dies before it reaches the scheduler this many times in a row is not
# restarted again (Dask's Nanny would restart it forever, as fast as it dies). A worker killed
# by its tasks (it had connected) is restarted every time, as by `dask worker`.
MAX_FAILED_STARTS = 5


_CLOSING = (Status.closing, Status.closing_gracefully, Status.closed)


def describe_exit(exitcode: int) -> str:
    if exitcode < 0:
        return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class NannyWatch:
    """What start-cluster adds to one of Dask's Nannies: a line per death, a crash-loop stop,
    the reason its worker closed, and a prompt stop of a worker that closes itself.

    It wraps the Nanny *instance* rather than subclassing ``Nanny`` because dask-cuda's
    ``CUDAWorker`` constructs its Nannies itself.

    Whether a worker process reached the scheduler is the worker's own word: it creates the
    file ``registered`` (one per Nanny, in a directory private to this rank's Nannies) the
    moment the scheduler accepts it (``HpcWorker.status``). The Nanny's ``instantiate``
    returning says it too late: a task that kills the process can arrive first.
    """

    def __init__(self, nanny: Nanny, registered: Path) -> None:
        self.nanny = nanny
        self.registered = registered
        nanny.worker_kwargs["registered_flag"] = str(registered)
        self.close_reason = ""
        self.failed_starts = 0  # worker processes in a row that died before connecting
        self.last_exit: int | None = None  # the exit code of its last worker process
        self._one_start = asyncio.Lock()  # Dask's starts of a worker process, one at a time
        self._tasks: set[asyncio.Task[Any]] = set()
        self._instantiate = nanny.instantiate
        self._on_worker_exit = nanny._on_worker_exit
        self._close_gracefully = nanny.handlers["close_gracefully"]
        nanny.instantiate = self.instantiate  # type: ignore[method-assign]
        nanny._on_worker_exit = self.on_worker_exit  # type: ignore[method-assign]
        nanny.handlers["close_gracefully"] = self.close_gracefully

    @property
    def name(self) -> str:
        return str(self.nanny.name)

    @property
    def lost_scheduler(self) -> bool:
        return self.close_reason in LOST_SCHEDULER_REASONS

    def _background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def connected(self) -> bool:
        """Did the newest worker process reach the scheduler?"""
        return self.registered.exists()

    async def instantiate(self) -> Status:
        """Start a worker process (Dask's own start) once the last start has returned.

        Dask restarts a worker killed by its task at once, even when the start that brought
        it up still polls for its 'connected' message (the task came first). That old start
        then polls the new start's status and queue, takes and drops the new worker's message,
        and both wait out the death timeout: Dask logs 'Timed out connecting Nanny' and an
        AssertionError traceback, and its Nanny can no longer close (distributed 2026.7.1,
        plain ``dask worker`` too: 3 rounds of tasks that kill their worker, then 15 s idle
        with --death-timeout 10). One at a time, the old start sees its process stopped within
        Dask's 50 ms poll and returns before the new one begins.
        """
        try:
            async with self._one_start:
                self.registered.unlink(missing_ok=True)
                status = await self._instantiate()
                process = self.nanny.process
                if status == Status.running and process is not None:  # it holds them open
                    semaphore_names.remove(process.init_result_q, process.child_stop_q)
                return status
        except asyncio.CancelledError:
            if self.nanny.status not in _CLOSING:
                raise
            # Closed while it restarted a worker (the cluster ended right after a crash):
            # not an error. Raised on, Dask would log it with a traceback.
            return Status.closed

    async def on_worker_exit(self, exitcode: int) -> None:
        """The worker process ended: say why, then let the Nanny restart it (or give up)."""
        self.last_exit = exitcode
        if self.nanny.status in (Status.init, Status.starting) and not self.connected:
            # Its first start failed; that start raises by itself. Dask before 2026.7 (whose
            # Nanny is still 'init' then) also restarted the process here, as fast as it died.
            return
        if self.nanny.status == Status.closing_gracefully:
            await self._close_after_graceful_exit()
            return
        if self.nanny.status != Status.running:  # closing: Dask's own handling
            await self._on_worker_exit(exitcode)
            return
        self.failed_starts = 0 if self.connected else self.failed_starts + 1
        if self.failed_starts >= MAX_FAILED_STARTS:
            say(
                f"worker {self.name} {describe_exit(exitcode)} before connecting, "
                f"{self.failed_starts} times in a row: not restarted (see its log above)"
            )
            self.close_reason = "dask-hpc-failed-starts"
            self._background(self._give_up())
            return
        if exitcode != 0:  # 0: stopped on purpose (a restart, a retirement)
            say(f"worker {self.name} {describe_exit(exitcode)}: restarting it")
        await self._on_worker_exit(exitcode)

    async def _close_after_graceful_exit(self) -> None:
        """What Dask's ``_on_worker_exit`` does for a worker that closed gracefully (it closes
        the Nanny), without its traceback when the rank's own end cancels that close: under
        scancel both happen at once, and Dask logged the CancelledError as an ERROR with a
        traceback into the job's output (a loaded CI run, 2026-11-30)."""
        try:
            await self.nanny.close(reason="nanny-close-gracefully")
        except asyncio.CancelledError:
            if self.nanny.status not in _CLOSING:
                raise

    async def _give_up(self) -> None:
        # Not awaited by on_worker_exit: Nanny.close waits for that background task to end. A
        # start still under way (its process already dead) returns first, so it is not cancelled.
        async with self._one_start:
            pass
        await self.nanny.close(reason=self.close_reason)

    def close_gracefully(self, reason: str = "nanny-close-gracefully") -> None:
        """The worker is closing (closed by the scheduler, retired, lost its scheduler)."""
        closing_for_good()
        self.close_reason = self.close_reason or reason
        self._close_gracefully(reason=reason)
        # Ask the worker process to stop now: without the Nanny's stop message it lingers 2 s
        # after its worker closed (distributed 2026.7.1: nanny.py, WorkerProcess._run joins its
        # stop-queue thread with timeout=2). Measured: 2.0 s -> 0.05 s per close.
        self._background(self.nanny.kill(reason=reason))


def end_a_start(nanny: Nanny) -> None:
    """End the worker process of ``nanny`` if it is still starting (being restarted).

    Dask's ``Nanny.close`` first waits for such a start to finish (up to its death timeout:
    the scheduler closing too, it never does) and then logs a traceback. A restart is what a
    worker killed by its last task is doing when the cluster ends; its rank ends it.
    """
    process = getattr(nanny, "process", None)
    if process is None or process.status != Status.starting or process.process is None:
        return
    try:
        os.kill(process.process.pid, signal.SIGKILL)
    except (ProcessLookupError, TypeError):  # gone, or not forked yet (no pid)
        pass


def skip_preload_imports() -> None:
    """Keep Dask from importing its forkserver preload list here, in the nanny host.

    The forkserver already runs (forked after ``dask_hpc.running.zygote``); Dask's
    ``get_mp_context`` would still import numpy, pandas and lz4 into this process only to set a
    preload list too late to matter. Measured on 2 cores: 1-worker start 2.78 s -> 2.52 s (median
    of 4). A private flag of distributed.utils; where it is gone, Dask's imports just happen.
    """
    if hasattr(distributed.utils, "_forkserver_preload_set"):
        distributed.utils._forkserver_preload_set = True


def build_nannies(specs: list[ProcessSpec], address: str) -> list[Nanny]:
    """One Nanny per worker: Dask's own, or the ones dask-cuda's CUDAWorker builds."""
    first = specs[0]
    common = worker_kwargs(first.options, address)
    common["worker_class"] = worker_class(first.options)
    if first.options["worker_class"] == "dask_cuda":
        from dask_cuda import CUDAWorker

        gpu = first.options["cuda"]
        devices = [s.env["CUDA_VISIBLE_DEVICES"] for s in specs if "CUDA_VISIBLE_DEVICES" in s.env]
        if devices:  # else the launcher's own single device stays (jsrun -g1, --gpus-per-task)
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
        name = first.name.rsplit("-", 1)[0] if len(specs) > 1 else first.name
        workers = CUDAWorker(
            address,
            name=name,
            resources=",".join(f"{k}={v:g}" for k, v in first.options["resources"].items()),
            device_memory_limit=gpu["device_memory_limit"],
            rmm_pool_size=gpu["rmm_pool_size"],
            enable_cudf_spill=gpu["enable_cudf_spill"],
            **common,
        )
        return list(workers.nannies)
    shared = shared_env(specs)
    return [
        Nanny(
            address,
            name=spec.name,
            resources=spec.options["resources"],
            env={k: v for k, v in spec.env.items() if k not in shared},
            **common,
        )
        for spec in specs
    ]


async def _run(specs: list[ProcessSpec], address: str, flags: Path) -> int:
    try:
        nannies = build_nannies(specs, address)
    except Exception as error:  # noqa: BLE001 - dask-cuda refusing its options, NVML missing
        say(f"the workers of this rank cannot be built: {error}")
        return EXIT_FAILED
    watches = [NannyWatch(n, flags / f"registered-{i}") for i, n in enumerate(nannies)]

    async def close_all() -> None:
        closing_for_good()
        for nanny in nannies:
            end_a_start(nanny)
        await asyncio.gather(*(n.close(timeout=5) for n in nannies), return_exceptions=True)

    closing: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: closing.append(loop.create_task(close_all())))
    starts = [asyncio.ensure_future(n) for n in nannies]
    started = await asyncio.gather(*starts, return_exceptions=True)
    failed = [(w, r) for w, r in zip(watches, started, strict=True) if isinstance(r, BaseException)]
    if failed and not closing:
        for watch, error in failed:
            last = watch.last_exit
            why = f"its process {describe_exit(last)}" if last is not None else str(error)
            say(f"worker {watch.name} failed to start: {why}")
        await close_all()
        return EXIT_FAILED
    await asyncio.gather(*(n.finished() for n in nannies))
    if closing:
        await asyncio.gather(*closing)
    return EXIT_SCHEDULER_LOST if any(w.lost_scheduler for w in watches) else EXIT_CLOSED


def run(specs: list[ProcessSpec], address: str) -> int:
    """Start this rank's workers under Nannies; return once every one has closed."""
    quiet_stderr()
    # Node-local and private to this process (0700): where the workers say they connected.
    local = specs[0].options["local_directory"]
    flags = Path(tempfile.mkdtemp(prefix=".dask-hpc-nannies-", dir=local))
    try:
        return event_loop.run(_run(specs, address, flags))
    finally:
        log_summary.flush()  # what the Nannies' listeners refused
        shutil.rmtree(flags, ignore_errors=True)
