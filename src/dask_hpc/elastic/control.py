"""Driving a running HPCCluster from another shell (``hpc-cluster scale/adapt/status/down``).

The requests travel through the cluster's own scheduler, over its TLS connection (so only its
owner can send them): a request is scheduler metadata under ``dask-hpc/requests/ID``, the
process that runs the cluster answers under ``dask-hpc/answers/ID`` and publishes its pools'
state under ``dask-hpc/status`` each round.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ..errors import UsageError

KEY = "dask-hpc"


async def serve(cluster: Any) -> None:
    """Answer the requests not answered yet, then publish the status (one round)."""
    comm = cluster.scheduler_comm
    requests = await comm.get_metadata(keys=[KEY, "requests"], default={})
    for rid, request in (requests or {}).items():
        if rid in cluster.answered:
            continue
        cluster.answered.add(rid)
        try:
            answer = {"ok": True, "message": await apply(cluster, request)}
        except UsageError as error:
            answer = {"ok": False, "message": str(error)}
        await comm.set_metadata(keys=[KEY, "answers", rid], value=answer)
    status = {"cluster": cluster.cluster_id, "pools": cluster.status_table(),
              "dashboard": cluster.dashboard_link}
    await comm.set_metadata(keys=[KEY, "status"], value=status)


async def apply(cluster: Any, request: dict[str, Any]) -> str:
    op = request.get("op")
    pool = cluster._pool(request.get("pool"))
    if op == "scale":
        jobs = request.get("jobs")
        if jobs is None:
            jobs = pool.jobs_for_workers(int(request.get("workers") or 0))
        pool.bounds, pool.broken, pool.failures, pool.target = None, None, 0, int(jobs)
        await cluster._reconciler.scale_now(pool)
        return f"pool {pool.name}: {jobs} job(s) of {pool.workers_per_job} worker(s)"
    if op == "adapt":
        low, high = request["jobs"]
        cluster.adapt(minimum_jobs=low, maximum_jobs=high, pool=pool.name)
        return f"pool {pool.name}: adapting between {low} and {high} job(s)"
    if op == "down":
        cluster.close_requested.set()
        return "closing"
    raise UsageError(f"unknown request {op!r}")


def send(client: Any, body: dict[str, Any]) -> str:
    """Leave a request for the process that runs the cluster; its id."""
    rid = uuid.uuid4().hex
    client.set_metadata([KEY, "requests", rid], body)
    return rid


def request(client: Any, body: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """Send ``body`` to the process that runs the cluster and wait for its answer."""
    rid = send(client, body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = client.get_metadata([KEY, "answers", rid], None)
        if answer is not None:
            return answer
        client.sync(asyncio.sleep, 0.2)
    raise UsageError(
        f"the cluster did not answer within {timeout:g} s",
        "is its hpc-cluster up process still running?",
    )
