"""dask-jobqueue's arguments, as HPCCluster's: ``SLURMCluster(cores=8, processes=4,
memory="16GB", ...)`` works as ``HPCCluster(...)`` with the same meaning, or is refused in one
line naming ours. The table here is the one docs/elastic.md shows.

A dask-jobqueue job is one node: ``cores`` and ``memory`` are the job's, shared by its
``processes`` workers (each gets ``cores / processes`` threads and ``memory / processes``), so
they are ``workers_per_node``, ``cpus_per_worker`` and ``memory_per_worker`` here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from dask.utils import parse_bytes
from distributed.deploy.utils import nprocesses_nthreads

from ..errors import UsageError

# dask-jobqueue's name -> ours, where the meaning is the same (the value passes as it is).
RENAMED = {
    "job_extra_directives": "job_directives",
    "job_script_prologue": "job_setup",
}
# Arguments of dask-jobqueue that HPCCluster has under the same name and meaning.
SAME = ("walltime", "queue", "account", "log_directory", "interface", "name", "silence_logs")
# dask-jobqueue's worker options, as start-cluster's (they go into worker_args).
WORKER_OPTIONS = {"local_directory": "--local-directory", "death_timeout": "--death-timeout"}
# dask-jobqueue's arguments with no counterpart, and what to use instead.
REFUSED = {
    "job_extra": "job_directives (dask-jobqueue's job_extra_directives)",
    "env_extra": "job_setup (dask-jobqueue's job_script_prologue)",
    "extra": "worker_args (dask-jobqueue's worker_extra_args)",
    "project": "account",
    "job_cpu": "cpus_per_worker (or jobqueue's cores)",
    "job_mem": "memory_per_worker (or jobqueue's memory)",
    "resource_spec": "cpus_per_worker, memory_per_worker, gpus_per_node, or job_directives",
    "job_directives_skip": "job_directives, or a site profile's batch.requests",
    "header_skip": "job_directives, or a site profile's batch.requests",
    "shebang": "nothing: job scripts are bash",
    "python": "image= (an Apptainer image), or run HPCCluster from the Python the jobs use",
    "job_name": "name= (jobs are named after the cluster and its pool)",
    "n_workers": "jobs= (whole jobs), or cluster.scale(n) after it starts",
    "security": "nothing: TLS is always on, with certificates made for the cluster",
    "protocol": "nothing: TLS is always on",
    "scheduler_options": "dashboard_address= and interface=",
    "worker_command": "worker_args (start-cluster's options)",
    "worker_class": "kind='gpu' (dask-cuda's workers on NVIDIA GPUs)",
    "config_name": "hpc.cluster.* in Dask's configuration",
}
JOBQUEUE = ("cores", "memory", "processes", "worker_extra_args", "nanny", *WORKER_OPTIONS,
            *RENAMED, *REFUSED)


def translate(jobqueue: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """HPCCluster's settings with dask-jobqueue's arguments (``jobqueue``) turned into ours;
    a UsageError for one that has no counterpart, or that disagrees with one of ours."""
    out = dict(settings)
    for key, value in jobqueue.items():
        if key in REFUSED:
            raise UsageError(
                f"HPCCluster has no {key}= (dask-jobqueue's)", f"use {REFUSED[key]}"
            )
        if key in RENAMED:
            _put(out, RENAMED[key], value, key)
        elif key not in JOBQUEUE:
            raise UsageError(
                f"HPCCluster() got an unexpected argument {key!r}",
                "see its arguments in docs/elastic.md (dask-jobqueue's are mapped there too)",
            )
    args = list(out.get("worker_args") or ())
    if isinstance(out.get("worker_args"), str):
        args = shlex.split(out["worker_args"])
    # dask-jobqueue joins these into the worker's command line: "--resources GPU=2" is two words
    args += [word for arg in jobqueue.get("worker_extra_args") or () for word in shlex.split(arg)]
    for key, flag in WORKER_OPTIONS.items():
        if jobqueue.get(key) is not None:
            args += [flag, str(jobqueue[key])]
    if jobqueue.get("nanny") is False:
        args.append("--no-nanny")
    if args:
        out["worker_args"] = args
    _job_shape(jobqueue, out)
    return out


def _put(out: dict[str, Any], ours: str, value: Any, theirs: str) -> None:
    if out.get(ours) not in (None, (), [], {}) and out[ours] != value:
        raise UsageError(f"{theirs}= and {ours}= disagree", f"give one of them ({ours})")
    out[ours] = value


def _job_shape(jobqueue: Mapping[str, Any], out: dict[str, Any]) -> None:
    """cores, memory, processes (a job's, dask-jobqueue's) as workers_per_node,
    cpus_per_worker, memory_per_worker."""
    cores, memory, processes = (jobqueue.get(k) for k in ("cores", "memory", "processes"))
    if cores is None and memory is None and processes is None:
        return
    for what, value in (("cores", cores), ("processes", processes)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise UsageError(f"{what} must be a whole number of at least 1, not {value!r}")
    if processes is None:
        processes = out.get("workers_per_node") or (nprocesses_nthreads(cores)[0] if cores else 1)
    _put(out, "workers_per_node", processes, "processes")
    if out.get("nodes_per_job") not in (None, 1):
        raise UsageError(
            "dask-jobqueue's cores, memory and processes describe one-node jobs",
            "give cpus_per_worker and memory_per_worker with nodes_per_job",
        )
    if cores is not None:
        if cores % processes:
            raise UsageError(
                f"cores={cores} is not a whole number of CPUs for each of {processes} processes",
                f"give cores a multiple of {processes}",
            )
        _put(out, "cpus_per_worker", cores // processes, "cores")
    if memory is not None:
        try:
            total = parse_bytes(memory)
        except (ValueError, TypeError):
            raise UsageError(f"memory={memory!r} is not a memory size", "e.g. 16GB") from None
        _put(out, "memory_per_worker", total // processes, "memory")


def scale_workers(
    n: int | None, memory: str | None, cores: int | None, threads: int | None, limit: str | None
) -> int | None:
    """Workers for ``scale(memory=)`` or ``scale(cores=)`` (dask-jobqueue's: as many workers as
    hold that much), from each worker's threads and memory limit; else ``n``."""
    if memory is None and cores is None:
        return n
    if n is not None:
        raise UsageError("scale by one of n, jobs, memory and cores")
    wanted = []
    if cores is not None:
        wanted.append(-(-int(cores) // max(1, threads or 1)))
    if memory is not None:
        if limit is None:
            raise UsageError(
                "scale(memory=) needs the workers' memory",
                "give memory_per_worker (or dask-jobqueue's memory) to HPCCluster",
            )
        wanted.append(-(-parse_bytes(memory) // parse_bytes(limit)))
    return max(wanted)
