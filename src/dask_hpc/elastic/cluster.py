"""``HPCCluster``: a Dask cluster that grows and shrinks by batch jobs.

Built on Dask's ``Cluster`` (repr, widget, logs, ``get_client``) and ``Adaptive`` (its periodic
loop), not on ``SpecCluster``: SpecCluster's grouped workers are what breaks for several
workers per job (it retires by spec name, never drops a group whose workers died,
distributed#9102; its adaptive compares worker counts with a plan rounded to whole jobs and
loops, dask-jobqueue#498, distributed#7019). Here everything is counted in jobs:

- each pool is asked for a number of jobs (``scale``, ``adapt``); one task reads every job's
  state with one batch command per ``poll-interval`` and corrects the difference: it submits
  what is missing, cancels queued jobs first when there are too many, and retires the
  workers of running ones through Dask (their data moves; the job then ends by itself);
- a queued job counts as asked for; a job that ended, whose workers are gone, that never
  connected a worker within ``start-timeout``, or whose workers are about to retire at the
  end of its walltime (Dask's worker lifetime), does not: its replacement is submitted early;
- a pool whose first jobs end before any worker connects (a bad image, a refused script)
  submits no more: one line says why, and what it submitted is cancelled.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import shutil
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from dask.utils import parse_timedelta
from distributed.core import Status, rpc
from distributed.deploy.cluster import Cluster
from distributed.exceptions import WorkerStartTimeoutError
from distributed.objects import SchedulerInfo as DaskSchedulerInfo
from distributed.utils import silence_logging_cmgr

from .. import config, security
from ..batch import commands, script
from ..connection import SchedulerInfo, read_scheduler_file
from ..errors import UsageError
from ..images import ImageError
from ..sites import Site, detect_site, load_site
from . import jobqueue_args, naming, sizing, state, tracking
from .display import Display
from .jobs import BatchClient, Job
from .pools import Pool, make_pool
from .scheduler import SCHEDULER_FILE, listen_host, security_for, start

logger = logging.getLogger(__name__)

SCHEDULERS = ("local", "job")


class HPCCluster(Display, Cluster):
    """A Dask cluster whose workers come in batch jobs, scaled by whole jobs.

    ``HPCCluster("gpu", workers_per_node=4, nodes_per_job=2, site="polaris",
    account="MyProject", queue="debug", walltime="01:00:00", image="dask-hpc-polaris.sif")``

    Every argument defaults to ``hpc.cluster.*`` in dask's config, then to the site profile
    (detected as start-cluster detects it; a plain Slurm, PBS or LSF cluster needs none). The
    first pool is named after ``kind`` unless ``pool`` is given; ``add_pool`` adds others.
    ``scheduler="job"`` runs the scheduler in a batch job of its own. TLS is always on, with
    certificates made for this cluster, readable by its owner only.
    """

    _instances: weakref.WeakSet[HPCCluster] = weakref.WeakSet()

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
        launcher: str | None = None,
        batch_system: str | None = None,
        scheduler: str | None = None,
        scheduler_walltime: str | None = None,
        pool: str | None = None,
        job_directives: Sequence[str] | None = None,
        job_setup: Sequence[str] | None = None,
        job_env: Mapping[str, str] | None = None,
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
        settings = jobqueue_args.translate(jobqueue, dict(
            kind=kind,
            workers_per_node=workers_per_node,
            nodes_per_job=nodes_per_job,
            site=site,
            account=account,
            queue=queue,
            walltime=walltime,
            image=image,
            launcher=launcher,
            batch_system=batch_system,
            scheduler=scheduler,
            scheduler_walltime=scheduler_walltime,
            pool=pool,
            job_directives=job_directives,
            job_setup=job_setup,
            job_env=job_env,
            worker_args=worker_args,
            lifetime_margin=lifetime_margin,
            cpus_per_worker=cpus_per_worker,
            memory_per_worker=memory_per_worker,
            gpus_per_node=gpus_per_node,
            interface=interface,
            dashboard_address=dashboard_address,
            directory=directory,
            log_directory=log_directory,
        ))  # dask-jobqueue's arguments, as ours (jobqueue_args.py)
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
            existing=(saved["cluster_id"], directory, state.pools_from(saved)),
        )
        self._attached = saved
        self._begin(0, None, silence_logs, asynchronous, loop, quiet)
        return self

    def _begin(
        self,
        jobs: int,
        name: str | None,
        silence_logs: str | int | bool,
        asynchronous: bool,
        loop: Any,
        quiet: bool,
    ) -> None:
        """Start the cluster (the event loop's side of ``__init__`` and ``attach``)."""
        first = next(iter(self.pools.values()))
        self._lock_fd: int | None = None
        self._state_text: str | None = None
        self._attached: dict[str, Any] | None = getattr(self, "_attached", None)
        self.jobs: dict[str, Job] = {}
        self.finished: deque[Job] = deque(maxlen=200)  # ended jobs, newest last
        self.rounds = 0  # rounds of job management done
        self.remote_control = False  # answer hpc-cluster's requests (control.py)
        self.answered: set[str] = set()
        self.close_requested = threading.Event()
        self.scheduler: Any = None  # the in-process Scheduler
        self.scheduler_job: Job | None = None
        self.info: SchedulerInfo | None = None
        self.security = None
        self._manager: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._exit_stack = contextlib.ExitStack()
        if silence_logs:  # the in-process scheduler's INFO lines, as dask-jobqueue does
            self._exit_stack.enter_context(silence_logging_cmgr(level=silence_logs))
        super().__init__(
            asynchronous=asynchronous, loop=loop, quiet=quiet, name=name or self.cluster_id
        )
        self._instances.add(self)
        if not self.called_from_running_loop:
            self._loop_runner.start()
            try:
                self.sync(self._start)
            except BaseException:
                self.sync(self._close)
                self._loop_runner.stop()
                raise
            if jobs:
                self.scale(jobs=jobs)
        elif jobs:
            first.target = jobs


    # ------------------------------------------------------------------ settings
    def _settle(
        self,
        kind: str | None = None,
        workers_per_node: int | None = None,
        nodes_per_job: int | None = None,
        site: str | None = None,
        account: str | None = None,
        queue: str | None = None,
        walltime: str | None = None,
        image: str | None = None,
        launcher: str | None = None,
        batch_system: str | None = None,
        scheduler: str | None = None,
        scheduler_walltime: str | None = None,
        pool: str | None = None,
        job_directives: Sequence[str] | None = None,
        job_setup: Sequence[str] | None = None,
        job_env: Mapping[str, str] | None = None,
        worker_args: Sequence[str] | str | None = None,
        lifetime_margin: float | None = None,
        cpus_per_worker: int | None = None,
        memory_per_worker: str | int | None = None,
        gpus_per_node: int | None = None,
        interface: str | None = None,
        dashboard_address: str = "127.0.0.1:0",
        directory: str | os.PathLike[str] | None = None,
        log_directory: str | os.PathLike[str] | None = None,
        check_commands: bool = True,
        existing: tuple[str, Path, dict[str, Pool]] | None = None,
    ) -> None:
        """Every setting, checked (a UsageError) before anything starts or is submitted; also
        what ``hpc-cluster script`` renders a job script from (batch commands not needed)."""
        site_name = site or config.get("site")
        self.site: Site = load_site(site_name) if site_name else detect_site()
        self.batch_system = self._batch_system(batch_system)
        system = commands.BatchSystem.named(self.batch_system)
        missing = system.missing_commands()
        if missing and check_commands:
            raise UsageError(
                f"{missing[0]} not found (the {self.batch_system} command the cluster needs)",
                "load the batch system's module, or fix PATH",
            )
        mode = scheduler or config.get("cluster.scheduler")
        if mode not in SCHEDULERS:
            raise UsageError(f"scheduler={mode!r} is not one of {SCHEDULERS}", "use local or job")
        self.scheduler_mode = mode
        self.interface = interface or self._site_interface()
        if interface:
            listen_host(interface)  # an interface this node does not have: one line now
        self._dashboard_address = dashboard_address
        self.cluster_id = existing[0] if existing else naming.new_cluster_id()
        self.pools: dict[str, Pool] = dict(existing[2]) if existing else {}
        first_kind = kind or config.get("cluster.kind")
        if not existing:
            self.add_pool(
                pool or first_kind,
                first_kind,
                workers_per_node=workers_per_node,
                nodes_per_job=nodes_per_job,
                walltime=walltime,
                account=account,
                queue=queue,
                image=image,
                launcher=launcher,
                job_directives=job_directives,
                job_setup=job_setup,
                job_env=job_env,
                worker_args=worker_args,
                lifetime_margin=lifetime_margin,
                cpus_per_worker=cpus_per_worker,
                memory_per_worker=memory_per_worker,
                gpus_per_node=gpus_per_node,
                batch_system=self.batch_system,
            )
        first = next(iter(self.pools.values()))
        self._scheduler_walltime = scheduler_walltime or config.get(
            "cluster.scheduler-walltime"
        ) or first.walltime
        script.parse_walltime(self._scheduler_walltime)
        self.directory = existing[1] if existing else self._cluster_directory(directory)
        self.scheduler_file = self.directory / SCHEDULER_FILE
        self.log_directory = Path(log_directory or config.get("cluster.log-directory") or "")
        if not str(log_directory or config.get("cluster.log-directory") or ""):
            self.log_directory = self.directory / "logs"
        self.poll_interval = float(config.get("cluster.poll-interval"))
        self.start_timeout = float(config.get("cluster.start-timeout"))
        self.end_grace = float(config.get("cluster.end-grace"))
        self.max_failures = int(config.get("cluster.max-failures"))
        self._batch = BatchClient(system, self.directory / "jobs")
        self.settings = {  # what another process needs to take this cluster over (attach)
            "site": self.site.name,
            "batch_system": self.batch_system,
            "scheduler": self.scheduler_mode,
            "scheduler_walltime": self._scheduler_walltime,
            "interface": self.interface,
            "dashboard_address": self._dashboard_address,
            "log_directory": str(self.log_directory),
        }
        for each in self.pools.values():
            self._check_script(each)

    def _check_script(self, pool: Pool) -> None:
        """Render a job of ``pool`` once: what the script refuses (an image key that is not
        there, a launcher the table lacks) is one line before anything is submitted."""
        script.render(self._request(pool, naming.job_name(self.cluster_id, pool.name, 0)))

    def _batch_system(self, asked: str | None) -> str:
        name = asked or config.get("cluster.batch-system")
        if not name and self.site.batch_system != "none":
            name = self.site.batch_system
        name = name or commands.detect()
        if not name:
            raise UsageError(
                "no batch system here: none of sbatch, qsub or bsub is on PATH",
                "run on a login node of the cluster, or pass batch_system=",
            )
        return str(name)

    def _site_interface(self) -> str | None:
        import psutil

        wanted = self.site.network_interface
        return wanted if wanted and wanted in psutil.net_if_addrs() else None

    def _cluster_directory(self, asked: str | os.PathLike[str] | None) -> Path:
        base = asked or config.get("scheduler-directory")
        base = base or self.site.expand(self.site.scheduler_directory, os.environ)
        base = Path(base or Path.home() / ".dask-hpc").expanduser().absolute()
        try:
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:
            raise UsageError(
                f"cannot use {base} for the cluster's files ({error.strerror})",
                "pass directory= on a file system the compute nodes share",
            ) from None
        return base / f"dask-hpc-{self.cluster_id}"

    def add_pool(
        self,
        name: str,
        kind: str | None = None,
        *,
        jobs: int = 0,
        **options: Any,
    ) -> Pool:
        """Add a pool: its own kind of worker, job size, queue, walltime (``HPCCluster``'s
        arguments); scale it with ``scale(..., pool=name)``; adapt grows it for the tasks
        that need its workers' resources (``resources={"GPU": 1}`` for a gpu pool)."""
        if name in self.pools:
            raise UsageError(f"the cluster already has a pool {name!r}", "pick another name")
        first = next(iter(self.pools.values()), None)
        if first is not None:  # a new pool inherits where the jobs go, not their shape
            for key in ("account", "queue", "image", "launcher", "walltime"):
                options.setdefault(key, getattr(first, key))
        new = make_pool(name, kind or name, self.site, **options)
        if new.image and not Path(new.image).is_file():
            raise UsageError(f"image {new.image} not found", "give the path of the .sif file")
        if hasattr(self, "settings"):  # a running cluster's new pool
            self._check_script(new)
        self.pools[name] = new
        if jobs:
            self.scale(jobs=jobs, pool=name)
        return new

    def _pool(self, name: str | None) -> Pool:
        if name is None:
            return next(iter(self.pools.values()))
        try:
            return self.pools[name]
        except KeyError:
            raise UsageError(
                f"no pool {name!r} in this cluster", f"use one of: {', '.join(self.pools)}"
            ) from None

    # ------------------------------------------------------------------ job scripts
    def _request(self, pool: Pool, job_name: str) -> script.JobRequest:
        return pool.request(
            self.site,
            self.batch_system,
            job_name,
            self.scheduler_file,
            self.log_directory / f"{job_name}.out",
            binds=[str(self.directory)],
        )

    def job_script(self, pool: str | None = None) -> str:
        """The batch script of this pool's next job."""
        chosen = self._pool(pool)
        name = naming.job_name(self.cluster_id, chosen.name, chosen.counter + 1)
        return script.render(self._request(chosen, name))

    def _scheduler_request(self) -> script.JobRequest:
        first = next(iter(self.pools.values()))
        module = ["-m", "dask_hpc.elastic.scheduler"]
        head = ["python3", *module] if first.image else [sys.executable, *module]
        program = [*head, "--directory", str(self.directory), "--cluster-id", self.cluster_id]
        if self.interface:
            program += ["--interface", self.interface]
        join = script.system_table(self.batch_system).get("join_output")
        return script.JobRequest(
            site=self.site.name,
            nodes=1,
            workers_per_node=1,
            worker_type="cpu",
            walltime=self._scheduler_walltime,
            account=first.account,
            queue=first.queue,
            image=first.image,
            job_name=f"{self.cluster_id}-scheduler",
            output=str(self.log_directory / f"{self.cluster_id}-scheduler.out"),
            batch_system=self.batch_system,
            python=sys.executable,
            program=program,
            env=first.env,
            directives=(*first.directives, *([join] if join else [])),
            setup=first.setup,
            binds=[str(self.directory)] if first.image else (),
        )

    # ------------------------------------------------------------------ start
    def __await__(self):  # type: ignore[no-untyped-def]
        async def _() -> HPCCluster:
            if self.status == Status.created:
                await self._start()
            return self

        return _().__await__()

    async def _start(self) -> None:
        if self.status != Status.created:
            return
        self.status = Status.starting
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        if self._attached is not None:
            await self._take_over(self._attached)
        else:
            await self._create()
        self.scheduler_comm = rpc(
            self.info.address, connection_args=self.security.get_connection_args("client")
        )
        await super()._start()
        for address, info in self.scheduler_info["workers"].items():
            self._worker_added(address, info.get("name"))
        self._manager = asyncio.ensure_future(self._manage())

    async def _create(self) -> None:
        """A new cluster: its directory, lock, certificates and scheduler."""
        self.directory.mkdir(mode=0o700)
        self._lock_fd = state.take_lock(self.directory)
        for sub in ("jobs", "logs"):
            (self.directory / sub).mkdir(mode=0o700)
        self.log_directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        files = security.create(self.directory, self.cluster_id)
        self.security = security_for(files)
        if self.scheduler_mode == "local":
            host = listen_host(self.interface)
            self.scheduler, self.info = await start(
                self.directory, self.cluster_id, files, host, self._dashboard_address
            )
        else:
            self.info = await self._start_scheduler_job()

    async def _take_over(self, saved: dict[str, Any]) -> None:
        """A cluster whose manager died: its scheduler (still up?), its lock, its jobs."""
        os.close(state.take_lock(self.directory))  # a UsageError while another manages it
        files = security.TlsFiles.in_directory(self.directory)
        self.security = security_for(files)
        info = read_scheduler_file(self.scheduler_file, self.cluster_id)
        gone = UsageError(
            f"the scheduler of cluster {self.cluster_id} is gone (it ran in the process that "
            "died, scheduler='local', or its job ended)",
            f"cancel what it left: hpc-cluster down {self.scheduler_file}",
        )
        if info is None:
            raise gone
        host, _, port = info.address.split("://", 1)[-1].rpartition(":")
        try:  # a refused connection says it at once (Dask's connect retries it for 30 s)
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 15)
            writer.close()
        except (OSError, asyncio.TimeoutError):
            raise gone from None
        probe = rpc(info.address, connection_args=self.security.get_connection_args("client"))
        try:
            await asyncio.wait_for(probe.identity(), 15)  # refused connects are retried
        except Exception:  # noqa: BLE001 - whatever the reason, nobody answers
            raise gone from None
        finally:
            await probe.close_rpc()
        self._lock_fd = state.take_lock(self.directory)
        self.info = info
        for job in state.jobs_from(saved):
            if job.name == saved["scheduler_job"]:
                self.scheduler_job = job
            else:
                self.jobs[job.name] = job

    async def _start_scheduler_job(self) -> SchedulerInfo:
        name = f"{self.cluster_id}-scheduler"
        job = Job(name, "", self.log_directory / f"{name}.out")
        self.scheduler_job = job
        job.job_id = await self._batch.submit(job, script.render(self._scheduler_request()))
        job.state = "queued"
        try:
            return await self._wait_for_scheduler(job)
        except BaseException:
            await self._cancel([job])
            raise

    async def _wait_for_scheduler(self, job: Job) -> SchedulerInfo:
        assert job.job_id is not None
        said_queued = False
        next_poll = 0.0
        while True:
            info = read_scheduler_file(self.scheduler_file, self.cluster_id)
            if info is not None:
                return info
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + self.poll_interval
                states = await self._batch.states([job.job_id])
                if states is not None:
                    listed = states.get(job.job_id)
                    category = self._batch.system.category(listed[0]) if listed else "ended"
                    if category == "ended":
                        job.state = "ended"
                        raise UsageError(
                            f"the scheduler's job {job.job_id} ended before the scheduler "
                            f"started: {job.log_tail()}",
                            f"see {job.log}",
                        )
                    if category == "running" and job.started_at is None:
                        job.started_at = now
                    if listed and self._batch.system.never_starts(listed[1]):
                        raise UsageError(
                            f"the scheduler's job {job.job_id} is held for {listed[1]}, a limit "
                            "it breaks: the batch system will never start it",
                            "ask for another queue, walltime or account",
                        )
                    if category == "queued" and not said_queued:
                        said_queued = True
                        self._say(f"waiting for the scheduler's job {job.job_id} in the queue")
                if job.started_at and now - job.started_at > self.start_timeout:
                    raise UsageError(
                        f"the scheduler's job {job.job_id} ran {self.start_timeout:g} s "
                        f"without starting the scheduler: {job.log_tail()}",
                        "raise hpc.cluster.start-timeout, or see the log",
                    )
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------ workers
    def _update_worker_status(self, op: str, msg: Any) -> None:
        if op == "add":
            for address, info in msg["workers"].items():
                self._worker_added(address, info.get("name"))
        elif op == "remove":
            self._worker_removed(msg)
        super()._update_worker_status(op, msg)

    def _worker_added(self, address: str, name: object) -> None:
        job = self.jobs.get(naming.job_of(name) or "")
        if job is None:
            return
        now = time.monotonic()
        job.workers[address] = str(name)
        job.ever_connected += 1
        job.empty_since = None
        if job.connected_at is None:
            job.connected_at = now
            pool = self.pools[job.pool]
            pool.latencies.append(now - job.submitted_at)
            pool.ever_connected = True
            pool.failures = 0

    def _worker_removed(self, address: str) -> None:
        for job in list(self.jobs.values()):
            if job.workers.pop(address, None) is not None:
                if not job.workers:
                    job.empty_since = time.monotonic()
                return

    # ------------------------------------------------------------------ the manager
    def _say(self, message: str) -> None:
        """One line for the user (kept in the cluster's logs too)."""
        self._log(f"HPCCluster {self.cluster_id}: {message}")

    def _log(self, log: str) -> None:
        import datetime

        self._cluster_manager_logs.append((datetime.datetime.now(), log))
        if not self.quiet:
            print(log, file=sys.stderr, flush=True)

    async def _manage(self) -> None:
        """Read the jobs' states and correct every pool, each poll interval (or when poked)."""
        assert self._wake is not None
        while self.status == Status.running:
            try:
                await self._tick()
            except Exception:  # noqa: BLE001 - one bad round must not end the cluster's care
                logger.warning("HPCCluster: a round of job management failed", exc_info=True)
            self._wake.clear()
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)

    async def _tick(self) -> None:
        await self._read_states()
        await self._correct_all()
        self._state_text = state.save(self, self._state_text)
        if self.remote_control:
            from . import control

            await control.serve(self)
        self.rounds += 1

    async def _read_states(self) -> None:
        live = [j for j in list(self.jobs.values()) if j.job_id and not j.ended]
        states = await self._batch.states([j.job_id for j in live])  # type: ignore[misc]
        if states is None:
            return
        now = time.monotonic()
        never = []
        for job in live:
            category, reason = tracking.read(
                job,
                states.get(job.job_id),  # type: ignore[arg-type]
                self._batch.system,
            )
            if reason is not None:
                never.append((job, reason))
            if category == "ended":
                self._job_ended(job)
                continue
            job.state = category
            if category == "running":
                if job.started_at is None:
                    job.started_at = now
                if not job.workers and job.empty_since is None:
                    job.empty_since = now
        for job in list(self.jobs.values()):
            if job.workers and not job.retiring and self._past_retirement(job, now):
                job.retiring = True  # Dask's lifetime has not retired them: do it now
                self._spawn(self._retire(job))
        for job, reason in never:
            if not job.cancelled:
                self._failed(job, f"is held for {reason}", never=True)
                await self._cancel([job])
        for job in list(self.jobs.values()):
            how = tracking.stuck(job, now, self.start_timeout, self.end_grace)
            if how == "never":
                empty = now - (job.empty_since or now)
                self._failed(job, f"ran {empty:.0f} s without connecting a worker")
            if how is not None:  # "gone": its workers are gone, it did not end: end it
                await self._cancel([job])

    def _past_retirement(self, job: Job, now: float) -> bool:
        return sizing.past_retirement(job, self.pools[job.pool], now, self.poll_interval)

    def _job_ended(self, job: Job) -> None:
        job.state = "ended"
        self.jobs.pop(job.name, None)
        self.finished.append(job)
        if not job.cancelled and not job.ever_connected:
            self._failed(job, f"ended ({job.batch_state or 'gone'})")

    def _failed(self, job: Job, how: str, never: bool = False) -> None:
        """A job that never connected a worker: say so; a pool that never worked, or that
        failed max-failures times in a row, or whose job can never start, submits no more."""
        pool = self.pools[job.pool]
        pool.failures += 1
        if never:
            message = (
                f"job {job.job_id} ({job.name}) {how}, a limit it breaks: the batch system "
                "will never start it"
            )
        else:
            message = (
                f"job {job.job_id} ({job.name}) {how} before any worker connected: "
                f"{job.log_tail()}"
            )
        if pool.broken:
            return
        if never or not pool.ever_connected or pool.failures >= self.max_failures:
            self._break(pool, message)
        else:
            self._say(f"warning: {message}")

    def _break(self, pool: Pool, message: str) -> None:
        pool.broken = message
        pool.target = 0
        self._say(f"error: {message}; pool {pool.name} submits no more jobs (fix it, then scale)")
        doomed = [j for j in list(self.jobs.values()) if j.pool == pool.name and not j.workers]
        self._spawn(self._cancel(doomed))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def counts(self, job: Job, now: float | None = None) -> bool:
        """Whether ``job`` counts toward its pool's size (``sizing.counts``)."""
        now = time.monotonic() if now is None else now
        return sizing.counts(job, self.pools[job.pool], now)

    def counted(self, pool: Pool) -> list[Job]:
        now = time.monotonic()
        return [j for j in list(self.jobs.values()) if j.pool == pool.name and self.counts(j, now)]

    async def _correct_all(self) -> None:
        assert self._lock is not None
        async with self._lock:
            for pool in list(self.pools.values()):
                await self._correct(pool)

    async def _correct(self, pool: Pool) -> None:
        if pool.broken or self.status != Status.running:
            return
        have = self.counted(pool)
        if len(have) < pool.target:
            await asyncio.gather(*(self._submit(pool) for _ in range(pool.target - len(have))))
        elif len(have) > pool.target:
            await self._shrink(have, len(have) - pool.target)

    async def _submit(self, pool: Pool) -> None:
        pool.counter += 1
        name = naming.job_name(self.cluster_id, pool.name, pool.counter)
        job = Job(name, pool.name, self.log_directory / f"{name}.out")
        self.jobs[name] = job
        try:
            job.job_id = await self._batch.submit(job, script.render(self._request(pool, name)))
        except (UsageError, ImageError) as error:
            self.jobs.pop(name, None)
            if not pool.broken:
                self._break(pool, str(error))
            return
        if job.cancelled:  # scaled down while it was being submitted
            await self._batch.cancel([job.job_id])
        elif job.state is None:
            job.state = "queued"

    async def _shrink(self, jobs: list[Job], n: int) -> None:
        """Give up ``n`` of ``jobs``: queued ones first (newest first), then running ones with
        no worker yet, then those whose walltime ends first (they end soonest anyway)."""

        chosen = sizing.shrink_choice(jobs, n)
        await self._cancel([j for j in chosen if not j.workers])
        for job in chosen:
            if job.workers:
                job.retiring = True
                self._spawn(self._retire(job))

    async def _cancel(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            job.cancelled = True
        await self._batch.cancel([j.job_id for j in jobs if j.job_id and not j.ended])

    async def _retire(self, job: Job) -> None:
        """Retire a job's workers through Dask: their data moves to the other workers, then
        they close, and the job's ranks end by themselves (start-cluster exits 0)."""
        names = sorted(job.workers.values())
        try:
            retired = await self.scheduler_comm.retire_workers(
                names=names,
                close_workers=True,
                remove=True,
                stimulus_id=f"dask-hpc-scale-down-{time.time()}",
            )
        except Exception as error:  # noqa: BLE001 - the scheduler went away
            retired = {}
            logger.info("retire_workers failed: %s", error)
        kept = set(names) - {str(info.get("name")) for info in retired.values()}
        if kept and self.status == Status.running:  # retired meanwhile (lifetime) or kept?
            with suppress(Exception):
                identity = await self.scheduler_comm.identity()
                kept &= {str(w.get("name")) for w in identity["workers"].values()}
        if kept and self.status == Status.running:
            self._say(
                f"job {job.job_id}: Dask kept {len(kept)} worker(s) it could not move the data "
                "of (no other worker to take it): cancelling the job"
            )
            await self._cancel([job])

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
            n, memory, cores, chosen.cpus_per_worker or chosen.threads_guess,
            chosen.memory_per_worker,
        )
        jobs = sizing.scale_jobs(chosen, n, jobs)
        chosen.bounds = None
        chosen.broken = None
        chosen.failures = 0
        chosen.target = jobs
        if self.asynchronous:
            return self._scale_now(chosen)
        self.sync(self._scale_now, chosen)
        return None

    async def _scale_now(self, pool: Pool) -> None:
        if self.status != Status.running:
            return
        assert self._lock is not None
        async with self._lock:
            await self._correct(pool)
        if pool.broken:
            raise UsageError(pool.broken)

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

    async def _desired_workers(self, target_duration: float) -> dict[str, int]:
        """Workers each pool wants now (scheduler side: ``targets.pool_targets``)."""
        spec = {
            p.name: {"resources": p.resources, "threads": p.threads_guess}
            for p in self.pools.values()
        }
        return await self.scheduler_comm.dask_hpc_targets(
            pools=spec, target_duration=target_duration
        )

    async def _idle_jobs(self, pool: Pool) -> list[Job]:
        """Jobs of ``pool`` Dask would close now: every worker idle, and enough memory left
        for the data (``Scheduler.workers_to_close`` with the job as the group)."""
        from distributed.protocol import pickle

        names = await self.scheduler_comm.workers_to_close(
            key=pickle.dumps(naming.job_key), attribute="name"
        )
        wanted = {naming.job_of(n) for n in names}
        return [
            j for j in self.counted(pool) if j.name in wanted and j.workers and j.state == "running"
        ]

    async def _adapt_pool(self, pool: Pool, jobs: int, close: bool) -> None:
        """Set ``pool``'s size (adapt); ``close``: give up idle jobs to get there."""
        assert self._lock is not None
        async with self._lock:
            have = self.counted(pool)
            if jobs >= len(have):
                pool.target = jobs
                await self._correct(pool)
                return
            if not close:
                return
            give_up = sizing.give_up(have, await self._idle_jobs(pool), jobs)
            pool.target = len(have) - len(give_up)
            await self._shrink(give_up, len(give_up))

    # ------------------------------------------------------------------ waiting
    async def _wait_for_workers(self, n_workers: int = 0, timeout: Any = None) -> None:
        deadline = time.monotonic() + parse_timedelta(timeout) if timeout else None
        while True:
            broken = [p.broken for p in self.pools.values() if p.broken]
            if broken:
                raise UsageError(broken[0])
            self.scheduler_info = DaskSchedulerInfo(await self.scheduler_comm.identity())
            running = sum(
                1 for w in self.scheduler_info["workers"].values() if w["status"] == "running"
            )
            if running >= n_workers:
                return
            if deadline and time.monotonic() > deadline:
                raise WorkerStartTimeoutError(running, n_workers, timeout)
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------------ close
    def close(self, timeout: float | None = None) -> Any:
        aw = super().close(timeout)
        if not self.asynchronous:
            self._loop_runner.stop()
        return aw

    async def _close(self) -> None:
        while self.status == Status.closing:
            await asyncio.sleep(0.1)
        if self.status == Status.closed:
            return
        self.status = Status.closing
        with suppress(AttributeError):
            self._adaptive.stop()
        if self._manager is not None:
            self._manager.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._manager
        for task in list(self._background):
            task.cancel()
        # A job with no worker connected has nothing to close gracefully: cancelled at once.
        idle = [j for j in list(self.jobs.values()) if not j.workers]
        with suppress(Exception):
            await self._cancel(idle)
        # Closing the scheduler closes every worker; each job's ranks then end by themselves.
        if self.scheduler is not None:
            with suppress(Exception):
                await self.scheduler.close(reason="HPCCluster.close")
        elif self.scheduler_comm is not None:
            with suppress(Exception):
                await asyncio.wait_for(self.scheduler_comm.terminate(), 10)
        if self.scheduler_job is not None and self.scheduler_job.job_id:
            self.jobs[self.scheduler_job.name] = self.scheduler_job
        await self._until_jobs_end()
        await super()._close()
        if self._lock_fd is not None:  # ours (a failed attach leaves it for hpc-cluster down)
            shutil.rmtree(self.directory, ignore_errors=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        self._exit_stack.close()

    async def _until_jobs_end(self) -> None:
        """Wait (end-grace) for the jobs to end by themselves, cancel the rest, wait for those."""
        deadline = time.monotonic() + self.end_grace
        cancelled = False
        while True:
            live = [j for j in list(self.jobs.values()) if j.job_id and not j.ended]
            if not live:
                return
            if time.monotonic() > deadline and not cancelled:
                cancelled = True
                await self._batch.cancel([j.job_id for j in live])  # type: ignore[misc]
                deadline = time.monotonic() + self.end_grace + 60  # the batch system's kill
            elif time.monotonic() > deadline:
                self._say(f"jobs still listed after cancelling: {[j.job_id for j in live]}")
                return
            states = await self._batch.states([j.job_id for j in live])  # type: ignore[misc]
            if states is not None:
                for job in live:
                    listed = states.get(job.job_id)  # type: ignore[arg-type]
                    if listed is None or self._batch.system.category(listed[0]) == "ended":
                        job.state = "ended"
                        self.jobs.pop(job.name, None)
            await asyncio.sleep(0.5)


@atexit.register
def _close_clusters() -> None:
    """Close what is still open at exit: no job is left queued or running."""
    for cluster in list(HPCCluster._instances):
        if cluster.status not in (Status.closed, Status.created) and not cluster.asynchronous:
            with suppress(Exception):
                cluster.close(timeout=60)
