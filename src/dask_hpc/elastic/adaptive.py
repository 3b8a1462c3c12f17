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

from . import sizing


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
            wanted = await self.cluster._desired_workers(self.target_duration)
            for pool in pools:
                jobs = sizing.adapt_target(pool, wanted.get(pool.name, 0))
                have = len(self.cluster.counted(pool))
                if jobs > have or (jobs == have and jobs != pool.target):
                    self.down_counts.pop(pool.name, None)
                    if jobs > have:
                        self.log.append((self._now(), {"pool": pool.name, "up": jobs}))
                    await self.cluster._adapt_pool(pool, jobs, close=False)
                elif jobs < have:
                    self.down_counts[pool.name] += 1
                    if self.down_counts[pool.name] >= self.wait_count:
                        self.down_counts.pop(pool.name, None)
                        self.log.append((self._now(), {"pool": pool.name, "down": jobs}))
                        await self.cluster._adapt_pool(pool, jobs, close=True)
                else:
                    self.down_counts.pop(pool.name, None)
        finally:
            self._adapting = False

    @staticmethod
    def _now() -> float:
        from distributed.metrics import time

        return time()
