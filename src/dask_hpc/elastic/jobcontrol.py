"""An elastic cluster's jobs and the actions on them: submit, cancel, retire, and failure.

``JobControl`` keeps the table of the cluster's jobs (live ones, and the last ended ones),
matches connecting and leaving workers to their jobs by name, and acts through the batch
system (submit, cancel) or through Dask (retire a job's workers, their data moved). It
decides nothing about sizes: the reconcile loop (``reconcile.py``) and ``sizing`` do.
A job that never connected a worker is a failure; a pool whose jobs keep failing breaks
(submits no more) with one line that says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from contextlib import suppress
from typing import Any

from distributed.core import Status

from ..batch import script
from ..errors import UsageError
from ..guard.images import ImageError
from . import naming, sizing, tracking
from .jobs import BatchClient, Job
from .pools import Pool

logger = logging.getLogger(__name__)


class JobControl:
    """The jobs of one cluster (``cluster``: the ``HPCCluster`` whose settings, pools, scheduler
    and status it reads) and what is done to them."""

    def __init__(self, cluster: Any, batch: BatchClient) -> None:
        self.cluster = cluster
        self.batch = batch
        self.jobs: dict[str, Job] = {}
        self.finished: deque[Job] = deque(maxlen=200)  # ended jobs, newest last
        self.background: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ workers
    def worker_added(self, address: str, name: object) -> None:
        job = self.jobs.get(naming.job_of(name) or "")
        if job is None:
            return
        now = time.monotonic()
        job.workers[address] = str(name)
        job.ever_connected += 1
        job.empty_since = None
        if job.connected_at is None:
            job.connected_at = now
            pool = self.cluster.pools[job.pool]
            pool.latencies.append(now - job.submitted_at)
            pool.ever_connected = True
            pool.failures = 0

    def worker_removed(self, address: str) -> None:
        for job in list(self.jobs.values()):
            if job.workers.pop(address, None) is not None:
                if not job.workers:
                    job.empty_since = time.monotonic()
                return

    # ------------------------------------------------------------------ ends and failures
    async def read(
        self, job: Job, listed: tuple[str, str] | None, now: float
    ) -> tuple[str | None, str | None]:
        """``tracking.read``; a job taken as ended only from its absence is cancelled before
        the cluster forgets it (a no-op if it did end; if the listing only lagged, it would
        run on unwatched, past its cluster's close)."""
        category, reason = tracking.read(job, listed, self.batch.system, now)
        if category == "ended" and listed is None and job.job_id:
            with suppress(Exception):
                await self.batch.cancel([job.job_id])
        return category, reason

    def ended(self, job: Job) -> None:
        job.state = "ended"
        self.jobs.pop(job.name, None)
        self.finished.append(job)
        if not job.cancelled and not job.ever_connected:
            why = f": {job.reason}" if job.reason not in ("", "None") else ""  # squeue: None
            self.failed(job, f"ended ({job.batch_state or 'gone'}{why})")

    def failed(self, job: Job, how: str, never: bool = False) -> None:
        """A job that never connected a worker: say so; a pool that never worked, or that
        failed max-failures times in a row, or whose job can never start, submits no more."""
        pool = self.cluster.pools[job.pool]
        pool.failures += 1
        if never:
            message = (
                f"job {job.job_id} ({job.name}) {how}, a limit it breaks: the batch system "
                "will never start it"
            )
        else:
            message = (
                f"job {job.job_id} ({job.name}) {how} before any worker connected: "
                f"{job.log_tail()}"
            )
        if pool.broken:
            return
        if never or not pool.ever_connected or pool.failures >= self.cluster.max_failures:
            self.break_pool(pool, message)
        else:
            self.cluster._say(f"warning: {message}")

    def break_pool(self, pool: Pool, message: str) -> None:
        pool.broken = message
        pool.target = 0
        self.cluster._say(
            f"error: {message}; pool {pool.name} submits no more jobs (fix it, then scale)"
        )
        doomed = [j for j in list(self.jobs.values()) if j.pool == pool.name and not j.workers]
        self.spawn(self.cancel(doomed))

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # ------------------------------------------------------------------ actions
    async def submit(self, pool: Pool) -> None:
        cluster = self.cluster
        pool.counter += 1
        name = naming.job_name(cluster.cluster_id, pool.name, pool.counter)
        job = Job(name, pool.name, cluster.log_directory / f"{name}.out")
        self.jobs[name] = job
        try:
            job.job_id = await self.submitted(job, script.render(cluster._request(pool, name)))
        except (UsageError, ImageError) as error:
            self.jobs.pop(name, None)
            if not pool.broken:
                self.break_pool(pool, str(error))
            return
        if job.cancelled:  # scaled down while it was being submitted
            await self.batch.cancel([job.job_id])
        elif job.state is None:
            job.state = "queued"

    async def submitted(self, job: Job, text: str) -> str:
        """``batch.submit``, seen to its end even when close cancels the loop meanwhile: the
        batch system may already hold the job, and close can cancel only a job whose id it
        knows (else it runs on, its cluster gone: seen in CI, a walltime replacement's
        ``flux batch`` still running when the test closed its cluster)."""
        submission = asyncio.ensure_future(self.batch.submit(job, text))
        try:
            return await asyncio.shield(submission)
        except asyncio.CancelledError:
            with suppress(Exception):
                job.job_id = await submission
            raise

    async def shrink(self, jobs: list[Job], n: int) -> None:
        """Give up ``n`` of ``jobs``: queued ones first (newest first), then running ones with
        no worker yet, then those whose walltime ends first (they end soonest anyway)."""

        chosen = sizing.shrink_choice(jobs, n)
        await self.cancel([j for j in chosen if not j.workers])
        for job in chosen:
            if job.workers:
                job.retiring = True
                self.spawn(self.retire(job))

    async def cancel(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            job.cancelled = True
        await self.batch.cancel([j.job_id for j in jobs if j.job_id and not j.ended])

    async def retire(self, job: Job) -> None:
        """Retire a job's workers through Dask: their data moves to the other workers, then
        they close, and the job's ranks end by themselves (start-cluster exits 0)."""
        cluster = self.cluster
        names = sorted(job.workers.values())
        try:
            retired = await cluster.scheduler_comm.retire_workers(
                names=names,
                close_workers=True,
                remove=True,
                stimulus_id=f"dask-hpc-scale-down-{time.time()}",
            )
        except Exception as error:  # noqa: BLE001 - the scheduler went away
            retired = {}
            logger.info("retire_workers failed: %s", error)
        kept = set(names) - {str(info.get("name")) for info in retired.values()}
        if kept and cluster.status == Status.running:  # retired meanwhile (lifetime) or kept?
            with suppress(Exception):
                identity = await cluster.scheduler_comm.identity()
                kept &= {str(w.get("name")) for w in identity["workers"].values()}
        if kept and cluster.status == Status.running:
            cluster._say(
                f"job {job.job_id}: Dask kept {len(kept)} worker(s) it could not move the data "
                "of (no other worker to take it): cancelling the job"
            )
            await self.cancel([job])

    # ------------------------------------------------------------------ the end
    async def stop(self) -> None:
        """At close: no more background actions; a job with no worker connected has nothing
        to close gracefully, so it is cancelled at once."""
        for task in list(self.background):
            task.cancel()
        idle = [j for j in list(self.jobs.values()) if not j.workers]
        with suppress(Exception):
            await self.cancel(idle)

    async def until_jobs_end(self) -> None:
        """Wait (end-grace) for the jobs to end by themselves, cancel the rest, wait for those."""
        end_grace = self.cluster.end_grace
        deadline = time.monotonic() + end_grace
        cancelled = False
        while True:
            live = [j for j in list(self.jobs.values()) if j.job_id and not j.ended]
            if not live:
                return
            if time.monotonic() > deadline and not cancelled:
                cancelled = True
                await self.batch.cancel([j.job_id for j in live])  # type: ignore[misc]
                deadline = time.monotonic() + end_grace + 60  # the batch system's kill
            elif time.monotonic() > deadline:
                self.cluster._say(f"jobs still listed after cancelling: {[j.job_id for j in live]}")
                return
            states = await self.batch.states([j.job_id for j in live])  # type: ignore[misc]
            if states is not None:
                now = time.monotonic()
                for job in live:
                    listed = states.get(job.job_id)  # type: ignore[arg-type]
                    if (await self.read(job, listed, now))[0] == "ended":
                        job.state = "ended"  # no failure counted: the cluster ends them
                        self.jobs.pop(job.name, None)
            await asyncio.sleep(0.5)
