"""``HPCCluster``: a Dask cluster that grows and shrinks by batch jobs; the facade users see.

It owns the constructor's arguments, ``attach``, ``scale`` and ``adapt``; the rest is its
parts, each in a module of its own:

- ``configured``: the settings (each defaulting to ``hpc.cluster.*``, then to the site profile,
  checked before anything starts), the pools (``add_pool``) and their job scripts;
- ``jobcluster``: Dask's ``Cluster`` life cycle (start, workers joining, wait, close), and why
  it is not Dask's ``SpecCluster``;
- ``jobcontrol``: the table of jobs, and submit, cancel, retire, failures;
- ``reconcile``: the loop that reads the jobs' states each ``poll-interval`` and corrects every
  pool: a queued job counts as asked for; a job that ended, whose workers are gone, that never
  connected a worker within ``start-timeout``, or whose workers are about to retire at the
  end of its walltime (Dask's worker lifetime), does not: its replacement is submitted early;
- ``adaptive``: Dask's ``Adaptive`` loop in whole jobs, per pool;
- ``placement``: the scheduler in this process or in a job of its own, and a takeover;
- ``display``: the dashboard link, the status table, the repr, the lines printed.

A pool whose first jobs end before any worker connects (a bad image, a refused script)
submits no more: one line says why, and what it submitted is cancelled.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..guard import private, security
from ..guard.connection import read_scheduler_file
from . import jobqueue_args, locations, placement, sizing, state
from .configured import ConfiguredCluster
from .scheduler import security_for

# HPCCluster's arguments that are not settings (ConfiguredCluster._settle takes the others).
FACADE_ONLY = frozenset(
    ("self", "jobs", "name", "silence_logs", "asynchronous", "loop", "quiet", "jobqueue")
)


class HPCCluster(ConfiguredCluster):
    """A Dask cluster whose workers come in batch jobs, scaled by whole jobs.

    ``HPCCluster("gpu", workers_per_node=4, nodes_per_job=2, site="polaris",
    account="MyProject", queue="debug", walltime="01:00:00", image="dask-hpc-polaris.sif")``

    Every argument defaults to ``hpc.cluster.*`` in dask's config, then to the site profile
    (detected as start-cluster detects it; a plain Slurm, PBS, LSF or Flux cluster needs none). The
    first pool is named after ``kind`` unless ``pool`` is given; ``add_pool`` adds others.
    ``scheduler="job"`` runs the scheduler in a batch job of its own. ``binds``: directories
    the workers' containers see (``image=``), Apptainer's ``SRC[:DST[:ro]]``, checked in each
    job before any rank starts. ``runtime``: what runs ``image`` (``apptainer``, ``pyxis`` or
    ``podman-hpc``, one the site has; default the site's own). TLS is always on, with
    certificates made for this cluster,
    readable by its owner only.
    """

    def __init__(
        self,
        kind: str | None = None,
        workers_per_node: int | None = None,
        nodes_per_job: int | None = None,
        *,
        site: str | None = None,
        account: str | None = None,
        queue: str | None = None,
        walltime: str | None = None,
        image: str | None = None,
        runtime: str | None = None,
        launcher: str | None = None,
        batch_system: str | None = None,
        scheduler: str | None = None,
        scheduler_walltime: str | None = None,
        pool: str | None = None,
        job_directives: Sequence[str] | None = None,
        job_setup: Sequence[str] | None = None,
        job_env: Mapping[str, str] | None = None,
        binds: Sequence[str] | str | None = None,
        worker_args: Sequence[str] | str | None = None,
        lifetime_margin: float | None = None,
        cpus_per_worker: int | None = None,
        memory_per_worker: str | int | None = None,
        gpus_per_node: int | None = None,
        interface: str | None = None,
        dashboard_address: str = "127.0.0.1:0",
        directory: str | os.PathLike[str] | None = None,
        log_directory: str | os.PathLike[str] | None = None,
        jobs: int = 0,
        name: str | None = None,
        silence_logs: str | int | bool = "error",
        asynchronous: bool = False,
        loop: Any = None,
        quiet: bool = False,
        **jobqueue: Any,
    ) -> None:
        # Every argument but the facade's own: the cluster's settings and the first pool's
        # options (PoolOptions), dask-jobqueue's turned into ours (jobqueue_args.py).
        given = {k: v for k, v in locals().items() if k not in FACADE_ONLY}
        settings = jobqueue_args.translate(jobqueue, given)
        self._settle(**settings)
        self._begin(jobs, name, silence_logs, asynchronous, loop, quiet)

    @classmethod
    def attach(
        cls,
        scheduler_file: str | os.PathLike[str],
        *,
        silence_logs: str | int | bool = "error",
        asynchronous: bool = False,
        loop: Any = None,
        quiet: bool = False,
    ) -> HPCCluster:
        """Take over a cluster whose manager died (a login node's killer; its scheduler lives
        on in a job of its own, ``scheduler="job"``): its jobs, pools and sizes, from the
        scheduler file it printed. A cluster another process still runs is refused."""
        read_scheduler_file(Path(scheduler_file).expanduser())  # another user's: UnsafePath
        directory = Path(scheduler_file).expanduser().resolve().parent
        saved = state.load(directory)
        self = cls.__new__(cls)
        settings = saved["settings"]
        self._settle(
            site=settings["site"],
            batch_system=settings["batch_system"],
            scheduler=settings["scheduler"],
            scheduler_walltime=settings["scheduler_walltime"],
            interface=settings["interface"],
            dashboard_address=settings["dashboard_address"],
            log_directory=settings["log_directory"],
            binds=settings.get("binds"),
            existing=(saved["cluster_id"], directory, state.pools_from(saved)),
        )
        self._attached = saved
        self._begin(0, None, silence_logs, asynchronous, loop, quiet)
        return self

    async def _create(self) -> None:
        """A new cluster: its directory, lock, certificates and scheduler."""
        private.own_directory(self.directory, "cluster directory", locations.DIRECTORY_FIX)
        self._lock_fd = state.take_lock(self.directory)
        for sub in ("jobs", "logs"):
            (self.directory / sub).mkdir(mode=0o700)  # in a directory of ours alone
        files = security.create(self.directory, self.cluster_id)
        self.security = security_for(files)
        await placement.start_scheduler(self, files)

    # ------------------------------------------------------------------ scale and adapt
    def scale(
        self,
        n: int | None = None,
        jobs: int | None = None,
        memory: str | None = None,
        cores: int | None = None,
        pool: str | None = None,
    ) -> Any:
        """Scale a pool (default: the first) to ``jobs`` jobs, or to ``n`` workers rounded up
        to whole jobs (``memory=``/``cores=``: the workers that hold that much, as
        dask-jobqueue's). Queued jobs are cancelled before running ones shrink; the workers of a
        running job are retired through Dask (data moved), then the job ends by itself.
        Stops adapting that pool. Submission problems raise here, in one line."""
        chosen = self._pool(pool)
        n = jobqueue_args.scale_workers(  # dask-jobqueue's scale(memory=, cores=)
            n,
            memory,
            cores,
            chosen.cpus_per_worker or chosen.threads_guess,
            chosen.memory_per_worker,
        )
        jobs = sizing.scale_jobs(chosen, n, jobs)
        chosen.bounds = None
        chosen.broken = None
        chosen.failures = 0
        chosen.target = jobs
        if self.asynchronous:
            return self._reconciler.scale_now(chosen)
        self.sync(self._reconciler.scale_now, chosen)
        return None

    def adapt(  # type: ignore[override]
        self,
        minimum_jobs: int | None = None,
        maximum_jobs: int | None = None,
        minimum: int | None = None,
        maximum: int | float | None = None,
        pool: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Adapt pools (default: every pool) between a minimum and a maximum number of jobs
        (or of workers, rounded to whole jobs): Dask's adaptive target, in jobs, per pool.
        ``interval``, ``wait_count``, ``target_duration``: as Dask's ``Adaptive``."""
        from .adaptive import JobAdaptive

        chosen = [self._pool(pool)] if pool else list(self.pools.values())
        for each in chosen:
            lo, hi = sizing.adapt_bounds(each, minimum_jobs, maximum_jobs, minimum, maximum)
            each.bounds = (lo, hi)
            each.broken = None
            each.failures = 0
        adaptive = self._adaptive
        if not isinstance(adaptive, JobAdaptive) or adaptive.state == "stopped":
            self._adaptive = JobAdaptive(self, **kwargs)
        return self._adaptive
