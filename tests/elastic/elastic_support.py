"""Helpers of the elastic-cluster tests (importable as ``elastic_support``)."""

from __future__ import annotations

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
