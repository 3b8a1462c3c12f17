"""``JobCluster``: Dask's ``Cluster`` whose workers come in batch jobs, counted in jobs.

The life cycle under ``HPCCluster`` (which adds the settings and the public API): start (the
scheduler placed, ``placement``; the reconcile loop started, ``reconcile``), the stream of
workers joining and leaving (matched to their jobs, ``jobcontrol``), ``wait_for_workers``, and
close (the loop stopped, jobs with no worker cancelled, the scheduler closed, then every job
waited for until it ends).

Built on Dask's ``Cluster`` (repr, widget, logs, ``get_client``) and ``Adaptive`` (its periodic
loop, ``adaptive.py``), not on ``SpecCluster`` as dask-jobqueue's ``JobQueueCluster`` is: its
worker spec is one job, and grouped workers are what breaks for several workers per job.
SpecCluster retires a group by spec name and never drops a group whose workers died while the
batch system still lists the job (distributed#9102); its adaptive compares worker counts with
a plan rounded to whole jobs, cancelling a queued job and asking for it again, forever
(dask-jobqueue#498, distributed#7019); it has no way to replace a job before its walltime
ends, nor to cancel a job that never connected a worker. Here everything is counted in jobs.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import threading
import time
import weakref
from collections import deque
from contextlib import suppress
from typing import Any

from dask.utils import parse_timedelta
from distributed.core import Status, rpc
from distributed.deploy.cluster import Cluster
from distributed.exceptions import WorkerStartTimeoutError
from distributed.objects import SchedulerInfo as DaskSchedulerInfo
from distributed.utils import silence_logging_cmgr

from ..errors import UsageError
from ..guard.connection import SchedulerInfo
from . import placement
from .display import Display
from .jobcontrol import JobControl
from .jobs import BatchClient, Job
from .pools import Pool
from .reconcile import Reconciler


class JobCluster(Display, Cluster):
    """The part of ``HPCCluster`` that Dask's ``Cluster`` calls: start, workers, wait, close."""

    _instances: weakref.WeakSet[JobCluster] = weakref.WeakSet()
    # Settings, made by ConfiguredCluster._settle (configured.py) before _begin
    cluster_id: str
    pools: dict[str, Pool]
    _batch: BatchClient

    def _begin(
        self,
        jobs: int,
        name: str | None,
        silence_logs: str | int | bool,
        asynchronous: bool,
        loop: Any,
        quiet: bool,
    ) -> None:
        """Start the cluster (the event loop's side of ``__init__`` and ``attach``)."""
        first = next(iter(self.pools.values()))
        self._lock_fd: int | None = None
        self._attached: dict[str, Any] | None = getattr(self, "_attached", None)
        self._job_control = JobControl(self, self._batch)
        self._reconciler = Reconciler(self, self._job_control)
        self.remote_control = False  # answer hpc-cluster's requests (control.py)
        self.answered: set[str] = set()
        self.close_requested = threading.Event()
        self.scheduler: Any = None  # the in-process Scheduler
        self.scheduler_job: Job | None = None
        self.info: SchedulerInfo | None = None
        self.security = None
        self._exit_stack = contextlib.ExitStack()
        if silence_logs:  # the in-process scheduler's INFO lines, as dask-jobqueue does
            self._exit_stack.enter_context(silence_logging_cmgr(level=silence_logs))
        super().__init__(
            asynchronous=asynchronous, loop=loop, quiet=quiet, name=name or self.cluster_id
        )
        self._instances.add(self)
        if not self.called_from_running_loop:
            self._loop_runner.start()
            try:
                self.sync(self._start)
            except BaseException:
                self.sync(self._close)
                self._loop_runner.stop()
                raise
            if jobs:
                self.scale(jobs=jobs)
        elif jobs:
            first.target = jobs

    @property
    def jobs(self) -> dict[str, Job]:
        """The cluster's jobs that have not ended, by name."""
        return self._job_control.jobs

    @property
    def finished(self) -> deque[Job]:
        """The last jobs that ended, newest last."""
        return self._job_control.finished

    @property
    def rounds(self) -> int:
        """Rounds of job management done."""
        return self._reconciler.rounds

    def counts(self, job: Job, now: float | None = None) -> bool:
        """Whether ``job`` counts toward its pool's size (``sizing.counts``)."""
        return self._reconciler.counts(job, now)

    def counted(self, pool: Pool) -> list[Job]:
        """The jobs that count toward ``pool``'s size now."""
        return self._reconciler.counted(pool)

    # ------------------------------------------------------------------ start
    def __await__(self):  # type: ignore[no-untyped-def]
        async def _() -> JobCluster:
            if self.status == Status.created:
                await self._start()
            return self

        return _().__await__()

    async def _start(self) -> None:
        if self.status != Status.created:
            return
        self.status = Status.starting
        self._reconciler.prepare()
        if self._attached is not None:
            await placement.take_over(self, self._attached)
        else:
            await self._create()
        self.scheduler_comm = rpc(
            self.info.address, connection_args=self.security.get_connection_args("client")
        )
        await super()._start()
        for address, info in self.scheduler_info["workers"].items():
            self._job_control.worker_added(address, info.get("name"))
        self._reconciler.start()

    async def _create(self) -> None:
        """A new cluster: its directory, lock, certificates and scheduler (HPCCluster's)."""
        raise NotImplementedError

    def _update_worker_status(self, op: str, msg: Any) -> None:
        if op == "add":
            for address, info in msg["workers"].items():
                self._job_control.worker_added(address, info.get("name"))
        elif op == "remove":
            self._job_control.worker_removed(msg)
        super()._update_worker_status(op, msg)

    async def _wait_for_workers(self, n_workers: int = 0, timeout: Any = None) -> None:
        deadline = time.monotonic() + parse_timedelta(timeout) if timeout else None
        while True:
            broken = [p.broken for p in self.pools.values() if p.broken]
            if broken:
                raise UsageError(broken[0])
            self.scheduler_info = DaskSchedulerInfo(await self.scheduler_comm.identity())
            running = sum(
                1 for w in self.scheduler_info["workers"].values() if w["status"] == "running"
            )
            if running >= n_workers:
                return
            if deadline and time.monotonic() > deadline:
                raise WorkerStartTimeoutError(running, n_workers, timeout)
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------------ close
    def close(self, timeout: float | None = None) -> Any:
        aw = super().close(timeout)
        if not self.asynchronous:
            self._loop_runner.stop()
        return aw

    async def _close(self) -> None:
        while self.status == Status.closing:
            await asyncio.sleep(0.1)
        if self.status == Status.closed:
            return
        self.status = Status.closing
        try:
            with suppress(AttributeError):
                self._adaptive.stop()
            await self._reconciler.stop()
            await self._job_control.stop()
            await placement.close_scheduler(self)
            await self._job_control.until_jobs_end()
        finally:  # closed even if a step failed: a second close must not wait for it forever
            await super()._close()
        if self._lock_fd is not None:  # ours (a failed attach leaves it for hpc-cluster down)
            shutil.rmtree(self.directory, ignore_errors=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        self._exit_stack.close()


@atexit.register
def _close_clusters() -> None:
    """Close what is still open at exit: no job is left queued or running."""
    for cluster in list(JobCluster._instances):
        if cluster.status not in (Status.closed, Status.created) and not cluster.asynchronous:
            with suppress(Exception):
                cluster.close(timeout=60)
