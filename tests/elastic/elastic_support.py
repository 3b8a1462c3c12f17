"""Helpers of the elastic-cluster tests (importable as ``elastic_support``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from jobs.listed import names

from dask_hpc import HPCCluster


def worker_names(client: Any) -> list[str]:
    return names(client)


def computed_twice(cluster: HPCCluster) -> list[str]:
    """Keys the (in-process) scheduler computed more than once: a recomputation."""
    finished: dict[str, int] = {}
    for entry in cluster.scheduler.transition_log:
        key, start, finish = entry[0], entry[1], entry[2]
        if start == "processing" and finish == "memory":
            finished[str(key)] = finished.get(str(key), 0) + 1
    return sorted(k for k, n in finished.items() if n > 1)


# Tasks are functions the workers can unpickle: from the standard library, or local to a test
# (pickled by value); a function of a test module is pickled by name, and the workers cannot
# import the test module (in Dask 2026.7 that breaks the worker's stream to the scheduler).


@dataclass
class Rounds:
    """What ``keep_computing`` did: its sums, and the fewest workers it saw connected."""

    total: int
    expected: int
    rounds: int
    fewest: int


def keep_computing(
    cluster: HPCCluster, client: Any, x: Any, base: int, seconds: float, task_seconds: float
) -> Rounds:
    """Round after round of ``(x + round).map_blocks(slow).sum()`` on the persisted 1-d array
    ``x`` (whose sum is ``base``) for ``seconds``, each block's task sleeping ``task_seconds``;
    the scheduler's workers counted twice a second meanwhile.

    The tasks sleep rather than compute: what the walltime tests need is work in flight and
    data held while jobs come and go, not CPU. With tasks of 0.05 s the Slurm test over three
    one-minute walltimes took 112 CPU s of the 2-core machine, with 0.25 s 64-75 (the suite's
    CPU log, 2026-11-29 and -30): the rest is the jobs' starts and the cluster's own work.
    """
    import numpy as np  # here: ~0.8 s of every pytest process's collection otherwise

    def slow(block: np.ndarray) -> np.ndarray:  # local: pickled by value
        time.sleep(task_seconds)
        return block

    done = Rounds(0, 0, 0, len(cluster.scheduler.workers))
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        future = client.compute((x + done.rounds).map_blocks(slow).sum())
        while not future.done():
            done.fewest = min(done.fewest, len(cluster.scheduler.workers))
            time.sleep(0.5)
        done.total += int(future.result())
        done.expected += base + done.rounds * len(x)
        done.rounds += 1
    return done
