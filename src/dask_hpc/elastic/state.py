"""What an elastic cluster's manager keeps on disk, so that another process can take it over.

The process that runs an ``HPCCluster`` holds an exclusive lock on ``manager.lock`` in the
cluster's directory and writes ``cluster.json`` (owner-only) whenever its jobs change: the
settings, the pools, and each job's id. When that process dies (a login node's killer, SIGKILL),
the lock goes with it: ``HPCCluster.attach(scheduler_file)`` takes the cluster over (its
scheduler must live on: ``scheduler="job"``), and ``cleanup`` cancels what it left.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ..batch.commands import BatchSystem
from ..errors import UsageError
from ..guard import private_files
from .jobs import BatchClient, Job
from .pools import Pool

STATE = "cluster.json"
LOCK = "manager.lock"
POOL_STATE = ("target", "bounds", "counter", "ever_connected")


def take_lock(directory: Path) -> int:
    """Hold the cluster's manager lock (an fd, kept open); a UsageError while another holds it."""
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"the cluster in {directory} is managed by a running process",
            "drive it with hpc-cluster, or close it there",
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def managed(directory: Path) -> bool:
    """Whether a running process manages the cluster in ``directory``."""
    try:
        os.close(take_lock(directory))
    except UsageError:
        return True
    return False


def snapshot(cluster: Any) -> dict[str, Any]:
    now, wall = time.monotonic(), time.time()

    def ago(moment: float | None) -> float | None:  # wall-clock, whole seconds: stable text
        return None if moment is None else round(wall - (now - moment))

    pools = []
    for pool in cluster.pools.values():
        fields = {f.name: getattr(pool, f.name) for f in dataclasses.fields(Pool)}
        fields = {k: v for k, v in fields.items() if k not in ("latencies", "broken")}
        if fields["bounds"] is not None:
            lo, hi = fields["bounds"]
            fields["bounds"] = [lo, None if math.isinf(hi) else hi]
        pools.append(fields)
    jobs = [
        {"name": j.name, "pool": j.pool, "job_id": j.job_id, "log": str(j.log),
         "ever_connected": j.ever_connected, "submitted": ago(j.submitted_at),
         "started": ago(j.started_at), "connected": ago(j.connected_at),
         "retiring": j.retiring, "expiring": j.expiring}
        for j in [*cluster.jobs.values(), *([cluster.scheduler_job] if cluster.scheduler_job
                                             else [])]
        if j.job_id and not j.ended
    ]
    return {
        "cluster_id": cluster.cluster_id,
        "settings": cluster.settings,
        "pools": pools,
        "jobs": jobs,
        "scheduler_job": cluster.scheduler_job.name if cluster.scheduler_job else None,
    }


def save(cluster: Any, text_before: str | None) -> str:
    """Write ``cluster.json`` if it changed; the text written (or kept)."""
    text = json.dumps(snapshot(cluster), indent=1, sort_keys=True)
    if text != text_before:
        private_files.write_file(cluster.directory / STATE, text.encode())
    return text


def load(directory: Path) -> dict[str, Any]:
    try:  # the owner's alone: another user's would name the jobs to cancel
        return json.loads(private_files.read_trusted(directory / STATE, "cluster state"))
    except (OSError, ValueError):
        raise UsageError(
            f"no elastic cluster's state in {directory}", "give the scheduler file it printed"
        ) from None


def pools_from(saved: dict[str, Any]) -> dict[str, Pool]:
    pools = {}
    for fields in saved["pools"]:
        fields = dict(fields)
        bounds = fields.pop("bounds")
        pool = Pool(**{**fields, "directives": tuple(fields["directives"]),
                       "setup": tuple(fields["setup"]),
                       "worker_args": tuple(fields["worker_args"])})
        pool.bounds = None if bounds is None else (bounds[0], bounds[1] or math.inf)
        pools[pool.name] = pool
    return pools


def jobs_from(saved: dict[str, Any]) -> list[Job]:
    now, wall = time.monotonic(), time.time()

    def back(moment: float | None) -> float | None:
        return None if moment is None else now - (wall - moment)

    jobs = []
    for entry in saved["jobs"]:
        job = Job(entry["name"], entry["pool"], Path(entry["log"]), job_id=entry["job_id"])
        job.ever_connected = entry["ever_connected"]
        job.submitted_at = back(entry["submitted"]) or now
        job.started_at, job.connected_at = back(entry["started"]), back(entry["connected"])
        job.retiring, job.expiring = entry["retiring"], entry["expiring"]
        jobs.append(job)
    return jobs


def cleanup(directory: Path) -> list[str]:
    """Cancel every job a dead manager left, remove the cluster's directory; the ids."""
    saved = load(directory)
    system = BatchSystem.named(saved["settings"]["batch_system"])
    ids = [job["job_id"] for job in saved["jobs"]]
    asyncio.run(BatchClient(system, directory / "jobs").cancel(ids))
    shutil.rmtree(directory, ignore_errors=True)
    return ids
