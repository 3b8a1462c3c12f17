"""Adaptive scaling in whole jobs, per pool: Dask's ``Adaptive`` loop with a job's arithmetic.

Dask's ``AdaptiveCore`` counts workers and closes "requested but not yet arrived" ones first;
with several workers per job a target that is not a multiple of the job's size makes it
cancel a queued job, then ask for it again, forever (dask-jobqueue#498, distributed#7019).
Here the target (Dask's ``adaptive_target``, or ``targets.pool_targets`` for several pools) is
turned into jobs, rounded up, before anything is compared; growing is at once, shrinking
needs ``wait_count`` rounds in a row and gives up only queued jobs and jobs Dask would close
(every worker idle, memory to spare: ``Scheduler.workers_to_close`` grouped by job).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from distributed.deploy.adaptive import Adaptive

from . import naming, sizing
from .jobs import Job
from .pools import Pool


class JobAdaptive(Adaptive):
    """Adapts every pool of an ``HPCCluster`` that has adaptive bounds."""

    def __init__(self, cluster: Any, **kwargs: Any) -> None:
        # Dask's minimum/maximum count workers of one kind; the bounds live on each pool.
        super().__init__(cluster, minimum=0, maximum=math.inf, **kwargs)
        self.down_counts: defaultdict[str, int] = defaultdict(int)

    async def adapt(self) -> None:
        if self._adapting:  # one round at a time, as Dask's
            return
        self._adapting = True
        try:
            pools = [p for p in self.cluster.pools.values() if p.bounds is not None]
            if not pools:
                return
            wanted = await self.desired_workers()
            resize = self.cluster._reconciler.adapt_pool
            for pool in pools:
                jobs = sizing.adapt_target(pool, wanted.get(pool.name, 0))
                have = len(self.cluster.counted(pool))
                if jobs > have or (jobs == have and jobs != pool.target):
                    self.down_counts.pop(pool.name, None)
                    if jobs > have:
                        self.log.append((self._now(), {"pool": pool.name, "up": jobs}))
                    await resize(pool, jobs, close=False, idle=self.idle_jobs)
                elif jobs < have:
                    self.down_counts[pool.name] += 1
                    if self.down_counts[pool.name] >= self.wait_count:
                        self.down_counts.pop(pool.name, None)
                        self.log.append((self._now(), {"pool": pool.name, "down": jobs}))
                        await resize(pool, jobs, close=True, idle=self.idle_jobs)
                else:
                    self.down_counts.pop(pool.name, None)
        finally:
            self._adapting = False

    async def desired_workers(self) -> dict[str, int]:
        """Workers each pool wants now (scheduler side: ``targets.pool_targets``)."""
        spec = {
            p.name: {"resources": p.resources, "threads": p.threads_guess}
            for p in self.cluster.pools.values()
        }
        return await self.cluster.scheduler_comm.dask_hpc_targets(
            pools=spec, target_duration=self.target_duration
        )

    async def idle_jobs(self, pool: Pool) -> list[Job]:
        """Jobs of ``pool`` Dask would close now: every worker idle, and enough memory left
        for the data (``Scheduler.workers_to_close`` with the job as the group)."""
        from distributed.protocol import pickle

        names = await self.cluster.scheduler_comm.workers_to_close(
            key=pickle.dumps(naming.job_key), attribute="name"
        )
        wanted = {naming.job_of(n) for n in names}
        return [
            j for j in self.cluster.counted(pool)
            if j.name in wanted and j.workers and j.state == "running"
        ]

    @staticmethod
    def _now() -> float:
        from distributed.metrics import time

        return time()
