"""Where an elastic cluster's scheduler runs, from the managing process's side: started in
this process, or submitted as a batch job of its own and waited for; found still alive when
another process takes the cluster over; closed at the end.

The scheduler itself (TLS, dashboard token, scheduler file, and the batch job's program) is
``scheduler.py``. A scheduler job that ends, is held for a limit it breaks, or runs past
``start-timeout`` without publishing its scheduler file is one line (a UsageError), and the job
is cancelled. ``cluster``: the ``HPCCluster`` whose settings these read and whose ``scheduler``,
``scheduler_job`` and ``info`` they set.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from contextlib import suppress
from typing import Any

from distributed.core import rpc

from ..batch import script
from ..errors import UsageError
from ..guard import import_path, security
from ..guard.connection import SchedulerInfo, read_scheduler_file
from . import state
from .jobs import Job
from .scheduler import listen_host, security_for, start


async def start_scheduler(cluster: Any, files: security.TlsFiles) -> None:
    """Start the scheduler where ``cluster.scheduler_mode`` says: here, or in a job."""
    if cluster.scheduler_mode == "local":
        host = listen_host(cluster.interface)
        cluster.scheduler, cluster.info = await start(
            cluster.directory, cluster.cluster_id, files, host, cluster._dashboard_address
        )
    else:
        cluster.info = await _start_scheduler_job(cluster)


def scheduler_request(cluster: Any) -> script.JobRequest:
    """The batch job of a scheduler of its own (``scheduler="job"``): the first pool's
    account, queue, image, environment and directives, on one node."""
    first = next(iter(cluster.pools.values()))
    python = "python3" if first.image else sys.executable  # the image's, or this one
    head = import_path.python_argv("dask_hpc.elastic.scheduler", python)
    program = [*head, "--directory", str(cluster.directory), "--cluster-id", cluster.cluster_id]
    if cluster.interface:
        program += ["--interface", cluster.interface]
    return script.JobRequest(
        site=cluster.site.name,
        nodes=1,
        workers_per_node=1,
        worker_type="cpu",
        walltime=cluster._scheduler_walltime,
        account=first.account,
        queue=first.queue,
        image=first.image,
        runtime=first.runtime,
        job_name=f"{cluster.cluster_id}-scheduler",
        output=str(cluster.log_directory / f"{cluster.cluster_id}-scheduler.out"),
        batch_system=cluster.batch_system,
        python=sys.executable,
        program=program,
        env=first.env,
        directives=first.directives,
        setup=first.setup,
        binds=[str(cluster.directory)] if first.image else (),
    )


async def _start_scheduler_job(cluster: Any) -> SchedulerInfo:
    control = cluster._job_control
    name = f"{cluster.cluster_id}-scheduler"
    job = Job(name, "", cluster.log_directory / f"{name}.out")
    cluster.scheduler_job = job
    try:
        job.job_id = await control.submitted(job, script.render(scheduler_request(cluster)))
        job.state = "queued"
        return await _wait_for_scheduler(cluster, job)
    except BaseException:  # Ctrl-C, a timeout: the job, once submitted, goes too
        await control.cancel([job])
        raise


async def _wait_for_scheduler(cluster: Any, job: Job) -> SchedulerInfo:
    assert job.job_id is not None
    batch = cluster._job_control.batch
    said_queued = False
    next_poll = 0.0
    while True:
        info = read_scheduler_file(cluster.scheduler_file, cluster.cluster_id)
        if info is not None:
            return info
        now = time.monotonic()
        if now >= next_poll:
            next_poll = now + cluster.poll_interval
            states = await batch.states([job.job_id])
            if states is not None:
                listed = states.get(job.job_id)
                category = batch.system.category(listed[0]) if listed else "ended"
                if category == "ended":
                    job.state = "ended"
                    raise UsageError(
                        f"the scheduler's job {job.job_id} ended before the scheduler "
                        f"started: {job.log_tail()}",
                        f"see {job.log}",
                    )
                if category == "running" and job.started_at is None:
                    job.started_at = now
                if listed and batch.system.never_starts(listed[1]):
                    raise UsageError(
                        f"the scheduler's job {job.job_id} is held for {listed[1]}, a limit "
                        "it breaks: the batch system will never start it",
                        "ask for another queue, walltime or account",
                    )
                if category == "queued" and not said_queued:
                    said_queued = True
                    cluster._say(f"waiting for the scheduler's job {job.job_id} in the queue")
            if job.started_at and now - job.started_at > cluster.start_timeout:
                raise UsageError(
                    f"the scheduler's job {job.job_id} ran {cluster.start_timeout:g} s "
                    f"without starting the scheduler: {job.log_tail()}",
                    "raise hpc.cluster.start-timeout, or see the log",
                )
        await asyncio.sleep(0.2)


async def take_over(cluster: Any, saved: dict[str, Any]) -> None:
    """A cluster whose manager died: its scheduler (still up?), its lock, its jobs."""
    os.close(state.take_lock(cluster.directory))  # a UsageError while another manages it
    files = security.TlsFiles.in_directory(cluster.directory)
    cluster.security = security_for(files)
    info = read_scheduler_file(cluster.scheduler_file, cluster.cluster_id)
    gone = UsageError(
        f"the scheduler of cluster {cluster.cluster_id} is gone (it ran in the process that "
        "died, scheduler='local', or its job ended)",
        f"cancel what it left: hpc-cluster down {cluster.scheduler_file}",
    )
    if info is None:
        raise gone
    host, _, port = info.address.split("://", 1)[-1].rpartition(":")
    try:  # a refused connection says it at once (Dask's connect retries it for 30 s)
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 15)
        writer.close()
    except (OSError, asyncio.TimeoutError):
        raise gone from None
    probe = rpc(info.address, connection_args=cluster.security.get_connection_args("client"))
    try:
        await asyncio.wait_for(probe.identity(), 15)  # refused connects are retried
    except Exception:  # noqa: BLE001 - whatever the reason, nobody answers
        raise gone from None
    finally:
        await probe.close_rpc()
    cluster._lock_fd = state.take_lock(cluster.directory)
    cluster.info = info
    for job in state.jobs_from(saved):
        if job.name == saved["scheduler_job"]:
            cluster.scheduler_job = job
        else:
            cluster.jobs[job.name] = job


async def close_scheduler(cluster: Any) -> None:
    """Close the scheduler (which closes every worker; each job's ranks then end by
    themselves); a scheduler job joins the jobs whose end the cluster waits for."""
    if cluster.scheduler is not None:
        with suppress(Exception):
            await cluster.scheduler.close(reason="HPCCluster.close")
    elif cluster.scheduler_comm is not None:
        with suppress(Exception):
            await asyncio.wait_for(cluster.scheduler_comm.terminate(), 10)
    if cluster.scheduler_job is not None and cluster.scheduler_job.job_id:
        cluster.jobs[cluster.scheduler_job.name] = cluster.scheduler_job
