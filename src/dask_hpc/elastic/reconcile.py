"""The reconcile loop of an elastic cluster: each poll interval, read every job's batch state
and bring every pool to the number of jobs it is asked for.

One task per cluster reads the states of all its jobs with one batch command, marks what
ended, retires the workers of jobs at the end of their walltime, cancels jobs that will never
start or never connected a worker (``tracking``), then corrects each pool: it submits what is
missing and gives up what is too many (``JobControl.shrink``). Which jobs count is decided in
``sizing``: a queued job counts; one that ended, lost its workers, or whose workers retire soon
(walltime) does not, so its replacement is submitted early. ``scale`` and adapt set a pool's
target through ``scale_now``/``adapt_pool``, under the same lock as the loop.

Not Dask's ``SpecCluster._correct_state``: it counts workers by spec name, so a job of several
workers is a group it retires by name and never replaces when its workers died while the batch
system still lists it (distributed#9102), and it cannot cancel a queued job before any worker
of it connected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

from distributed.core import Status

from ..errors import UsageError
from . import sizing, state, tracking
from .jobcontrol import JobControl
from .jobs import Job
from .pools import Pool

logger = logging.getLogger(__name__)


class Reconciler:
    """The loop that keeps ``cluster``'s pools at their targets (``cluster``: the
    ``HPCCluster`` whose pools, settings and status it reads), acting through ``control``."""

    def __init__(self, cluster: Any, control: JobControl) -> None:
        self.cluster = cluster
        self.control = control
        self.rounds = 0  # rounds of job management done
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._state_text: str | None = None
        self._last_asked: float | None = None  # when the last reading of job states began

    def prepare(self) -> None:
        """Make the loop's event and lock (in the event loop, before ``scale`` may run)."""
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._manage())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._task

    # ------------------------------------------------------------------ counting
    def counts(self, job: Job, now: float | None = None) -> bool:
        """Whether ``job`` counts toward its pool's size (``sizing.counts``)."""
        now = time.monotonic() if now is None else now
        return sizing.counts(job, self.cluster.pools[job.pool], now)

    def counted(self, pool: Pool) -> list[Job]:
        now = time.monotonic()
        jobs = list(self.control.jobs.values())
        return [j for j in jobs if j.pool == pool.name and self.counts(j, now)]

    # ------------------------------------------------------------------ the loop
    async def _manage(self) -> None:
        """Read the jobs' states and correct every pool, each poll interval (or when poked)."""
        assert self._wake is not None
        while self.cluster.status == Status.running:
            try:
                await self._tick()
            except Exception:  # noqa: BLE001 - one bad round must not end the cluster's care
                logger.warning("HPCCluster: a round of job management failed", exc_info=True)
            self._wake.clear()
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.cluster.poll_interval)

    async def _tick(self) -> None:
        await self._read_states()
        await self._correct_all()
        self._state_text = state.save(self.cluster, self._state_text)
        if self.cluster.remote_control:
            from . import control

            await control.serve(self.cluster)
        self.rounds += 1

    async def _read_states(self) -> None:
        cluster, control = self.cluster, self.control
        live = [j for j in list(control.jobs.values()) if j.job_id and not j.ended]
        asked = time.monotonic()
        states = await control.batch.states([j.job_id for j in live])  # type: ignore[misc]
        if states is None:
            return
        now, last_asked, self._last_asked = time.monotonic(), self._last_asked, asked
        never = []
        for job in live:
            listed = states.get(job.job_id)  # type: ignore[arg-type]
            category, reason = await control.read(job, listed, now)
            if reason is not None:
                never.append((job, reason))
            if category == "ended":
                control.ended(job)
                continue
            job.state = category
            if category == "running":
                if job.started_at is None:
                    lag = control.batch.system.listing_lag
                    job.started_at = sizing.started_between(job, last_asked, lag)
                if not job.workers and job.empty_since is None:
                    job.empty_since = now
        for job in list(control.jobs.values()):
            if job.workers and not job.retiring and self._past_retirement(job, now):
                job.retiring = True  # Dask's lifetime has not retired them: do it now
                control.spawn(control.retire(job))
        for job, reason in never:
            if not job.cancelled:
                control.failed(job, f"is held for {reason}", never=True)
                await control.cancel([job])
        for job in list(control.jobs.values()):
            how = tracking.stuck(job, now, cluster.start_timeout, cluster.end_grace)
            if how == "never":
                empty = now - (job.empty_since or now)
                control.failed(job, f"ran {empty:.0f} s without connecting a worker")
            if how is not None:  # "gone": its workers are gone, it did not end: end it
                await control.cancel([job])

    def _past_retirement(self, job: Job, now: float) -> bool:
        pool = self.cluster.pools[job.pool]
        return sizing.past_retirement(job, pool, now)

    # ------------------------------------------------------------------ corrections
    async def _correct_all(self) -> None:
        assert self._lock is not None
        async with self._lock:
            for pool in list(self.cluster.pools.values()):
                await self._correct(pool)

    async def _correct(self, pool: Pool) -> None:
        if pool.broken or self.cluster.status != Status.running:
            return
        have = self.counted(pool)
        if len(have) < pool.target:
            submits = (self.control.submit(pool) for _ in range(pool.target - len(have)))
            await asyncio.gather(*submits)
        elif len(have) > pool.target:
            await self.control.shrink(have, len(have) - pool.target)

    async def scale_now(self, pool: Pool) -> None:
        """Bring ``pool`` to its (new) target now; a submission problem is a UsageError."""
        if self.cluster.status != Status.running:
            return
        assert self._lock is not None
        async with self._lock:
            await self._correct(pool)
        if pool.broken:
            raise UsageError(pool.broken)

    async def adapt_pool(
        self, pool: Pool, jobs: int, close: bool, idle: Callable[[Pool], Awaitable[list[Job]]]
    ) -> None:
        """Set ``pool``'s size (adapt); ``close``: give up idle jobs to get there (``idle``
        lists the jobs of a pool Dask would close, asked only then)."""
        assert self._lock is not None
        async with self._lock:
            have = self.counted(pool)
            if jobs >= len(have):
                pool.target = jobs
                await self._correct(pool)
                return
            if not close:
                return
            give_up = sizing.give_up(have, await idle(pool), jobs)
            pool.target = len(have) - len(give_up)
            await self.control.shrink(give_up, len(give_up))
