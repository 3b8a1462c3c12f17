"""A scheduler preload for benchmarks/scale.py: the scheduler thread's CPU while workers join
and leave.

Rank 0's CPU as a whole also holds what grows with the run's wall time (the scheduler's and
rank 0's own worker's periodic callbacks), and on a 2-core machine the simulators stretch the
wall time; the event loop's thread CPU between the first and the last join, and between the
first and the last removal, is the cost of the workers themselves. Loaded with
``DASK_DISTRIBUTED__SCHEDULER__PRELOAD=<this file>``; writes JSON to ``$SCALE_PROBE_OUT``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from distributed import Scheduler
from distributed.diagnostics.plugin import SchedulerPlugin


class JoinsAndLeaves(SchedulerPlugin):
    """Thread CPU and wall time at the first and last join and removal."""

    name = "dask-hpc-benchmark-probe"

    def __init__(self) -> None:
        self.marks: dict[str, Any] = {"joins": 0, "leaves": 0}

    def _mark(self, event: str) -> None:
        now = (time.thread_time(), time.time())
        self.marks.setdefault(f"first_{event}", now)
        self.marks[f"last_{event}"] = now

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        self.marks["joins"] += 1
        self._mark("join")

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        self.marks["leaves"] += 1
        self._mark("leave")

    async def close(self) -> None:
        with open(os.environ["SCALE_PROBE_OUT"], "w") as out:
            json.dump(self.marks, out)


def dask_setup(scheduler: Scheduler) -> None:
    scheduler.add_plugin(JoinsAndLeaves())
