"""Names of an elastic cluster's jobs and workers: the one place that knows their format.

A job is ``CLUSTER-POOL-N`` (its batch job name too), and start-cluster names the job's
workers ``CLUSTER-POOL-N-RANK[-I]`` (``--join ... --name-prefix CLUSTER-POOL-N``), so a worker's
job and pool are read back from its name alone, here and in the scheduler.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

POOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,15}")
WORKER_NAME = re.compile(r"(dh[0-9a-f]{6}-[a-z][a-z0-9_]{0,15}-\d+)-\d+(?:-\d+)?")


def new_cluster_id() -> str:
    """A short id, unique enough among one user's clusters: ``dh`` and 6 hex digits."""
    return "dh" + secrets.token_hex(3)


def job_name(cluster_id: str, pool: str, number: int) -> str:
    return f"{cluster_id}-{pool}-{number}"


def job_of(worker_name: object) -> str | None:
    """The job a worker of an elastic cluster belongs to (None: not one of its workers)."""
    match = WORKER_NAME.fullmatch(str(worker_name))
    return match.group(1) if match else None


def pool_of(worker_name: object) -> str | None:
    """The pool of a worker (or of a job, by the job's name)."""
    parts = str(worker_name).split("-")
    return parts[1] if len(parts) >= 3 else None


def job_key(ws: Any) -> str:
    """``Scheduler.workers_to_close(key=...)``: a worker's group is its job (pickled by
    reference, so it runs wherever dask_hpc is importable: this process or a scheduler job)."""
    return job_of(ws.name) or str(ws.address)
