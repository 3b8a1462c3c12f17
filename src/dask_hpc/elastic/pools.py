"""A pool: one kind of job of an elastic cluster (CPU or GPU workers, its own size and queue).

A pool's settings come from the arguments (``PoolOptions``), else ``hpc.cluster.*`` in dask's
config, else the site profile; it renders its jobs' scripts with ``dask_hpc.batch.script``. Its
state (the jobs it is asked for, adaptive bounds, failures) lives with it, changed only by the
cluster.
"""

from __future__ import annotations

import math
import shlex
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..batch import commands, requests, runtimes, script
from ..errors import UsageError
from ..planning.sites import Site
from .naming import POOL_NAME
from .pool_options import PoolOptions

LIFETIME_ENV = "DASK_DISTRIBUTED__WORKER__LIFETIME__"
# Share of the walltime kept free at its end, within these bounds: the workers retire (their
# data moved by Dask) before the batch system kills the job.
MARGIN_SHARE, MARGIN_MIN, MARGIN_MAX = 1 / 6, 20.0, 600.0
KINDS = ("cpu", "gpu")


@dataclass
class Pool:
    """What one pool's jobs look like, and what the cluster asks of the pool."""

    name: str
    kind: str
    workers_per_node: int
    nodes_per_job: int
    walltime: str
    walltime_seconds: int
    account: str | None
    queue: str | None
    image: str | None
    launcher: str | None
    directives: tuple[str, ...]
    setup: tuple[str, ...]
    env: dict[str, str]
    worker_args: tuple[str, ...]
    lifetime_margin: float
    threads_guess: int  # threads per worker before any worker has connected
    lifetime_stagger: float | None = None  # dask-jobqueue's --lifetime-stagger, as given
    cpus_per_worker: int | None = None  # asked of the batch system (batch.requests)
    memory_per_worker: str | None = None
    gpus_per_node: int | None = None
    runtime: str | None = None  # the container runtime that runs image (batch.runtimes)
    # What the cluster asks of it
    target: int = 0  # jobs
    bounds: tuple[int, float] | None = None  # adaptive (minimum, maximum) jobs, or manual
    broken: str | None = None  # why it submits no more jobs
    failures: int = 0  # jobs in a row that ended before any worker connected
    ever_connected: bool = False
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=5))
    counter: int = 0  # jobs submitted so far (their numbers)

    @property
    def workers_per_job(self) -> int:
        return self.workers_per_node * self.nodes_per_job

    @property
    def resources(self) -> dict[str, float]:
        """What each of its workers offers tasks (start-cluster gives gpu workers GPU=1, and
        what its ``--resources`` says)."""
        from ..cli import resource_spec

        given = requests.option_value(self.worker_args, "--resources")
        return {**({"GPU": 1} if self.kind == "gpu" else {}), **resource_spec(given or "")}

    def lifetime(self) -> tuple[float, float]:
        """(duration, stagger) of Dask's worker lifetime: every worker retires within
        ``duration +- stagger`` of its start, all before the walltime."""
        duration = self.walltime_seconds - self.lifetime_margin
        stagger = self.lifetime_stagger
        return duration, self.lifetime_margin / 4 if stagger is None else stagger

    def retire_lead(self) -> float:
        """How long before its first worker retires a job stops counting, so that its
        replacement is connected by then: the slowest recent submit-to-connected time, with
        half again as margin (60 s before any job connected), at most half the walltime."""
        latency = max(self.latencies) if self.latencies else 60.0
        return min(1.5 * latency + 5.0, self.walltime_seconds / 2)

    def jobs_for_workers(self, workers: int) -> int:
        return math.ceil(workers / self.workers_per_job)

    def request(
        self,
        site: Site,
        batch_system: str,
        job_name: str,
        scheduler_file: Path,
        log: Path,
        binds: Sequence[str],
    ) -> script.JobRequest:
        """The batch job of one job of this pool."""
        duration, stagger = self.lifetime()
        env = {
            f"{LIFETIME_ENV}DURATION": f"{duration:.0f}s",
            f"{LIFETIME_ENV}STAGGER": f"{stagger:.0f}s",
            f"{LIFETIME_ENV}RESTART": "False",
            **self.env,
        }
        return script.JobRequest(
            site=site.name,
            nodes=self.nodes_per_job,
            workers_per_node=self.workers_per_node,
            worker_type=self.kind,
            walltime=self.walltime,
            account=self.account,
            queue=self.queue,
            image=self.image,
            runtime=self.runtime,
            job_name=job_name,
            output=str(log),
            batch_system=batch_system,
            launcher=self.launcher,
            cluster_args=(
                "--join", str(scheduler_file), "--name-prefix", job_name, "--site", site.name,
                *self.worker_args,
            ),
            python=sys.executable,
            env=env,
            directives=self.directives,
            setup=self.setup,
            binds=binds if self.image else (),
            gpus_per_node=self.gpus_per_node,
            cpus_per_worker=self.cpus_per_worker,
            memory_per_worker=self.memory_per_worker,
        )


def make_pool(
    name: str, kind: str, site: Site, *, batch_system: str | None = None, **options: Any
) -> Pool:
    """A pool from keyword arguments (``PoolOptions``'), ``hpc.cluster.*`` and the site."""
    return pool_from(name, kind, site, PoolOptions.given(options, "make_pool"), batch_system)


def pool_from(
    name: str, kind: str, site: Site, given: PoolOptions, batch_system: str | None = None
) -> Pool:
    """A pool from its options, ``hpc.cluster.*`` and the site; bad input is a UsageError."""
    if not POOL_NAME.fullmatch(name):
        raise UsageError(
            f"pool name {name!r} is not a short lowercase name", "e.g. cpu, gpu, bigmem (a-z0-9_)"
        )
    if kind not in KINDS:
        raise UsageError(f"unknown worker kind {kind!r}", "use cpu or gpu")
    o = given.with_config()
    wpn = o.workers_per_node
    if wpn is None:  # a GPU count nothing says is a UsageError, not one worker
        system = batch_system or (site.batch_system if site.batch_system != "none" else None)
        row = script.system_table(system or commands.detect() or "slurm")
        wpn = requests.default_workers_per_node(site, row, kind, o.queue, o.gpus_per_node)
    nodes = o.nodes_per_job
    for what, value in (("workers_per_node", wpn), ("nodes_per_job", nodes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UsageError(f"{what} must be a whole number of at least 1, not {value!r}")
    if kind == "gpu" and site.gpu_count and wpn > site.gpu_count * site.gpu_tiles:
        raise UsageError(
            f"{wpn} gpu workers per node, but a {site.name} node has "
            f"{site.gpu_count * site.gpu_tiles} GPUs",
            "ask for fewer workers_per_node",
        )
    wall = str(o.walltime)
    seconds = script.parse_walltime(wall)
    args = o.worker_args or ()
    if isinstance(args, str):
        args = shlex.split(args)
    for arg in args:
        if arg in ("--join", "--name-prefix", "--", "--jupyter") or arg.startswith("--join="):
            raise UsageError(f"worker_args may not hold {arg}", "the cluster sets it itself")
    args, lifetime = dask_lifetime(list(args))
    check_worker_args(args)
    margin = o.lifetime_margin
    stagger = None
    if lifetime is not None:  # dask-jobqueue's own walltime recipe, as our recycling
        margin, stagger = lifetime_as_margin(lifetime, seconds, wall, margin)
    if margin is None:
        margin = min(MARGIN_MAX, max(MARGIN_MIN, seconds * MARGIN_SHARE))
        system = batch_system or (site.batch_system if site.batch_system != "none" else None)
        if system:  # a batch job's own start and stop besides its script (Flux: an instance)
            margin += float(script.system_table(system).get("job_overhead") or 0)
    margin = float(margin)
    if lifetime is None and not 0 < margin < seconds / 2:
        raise UsageError(
            f"lifetime margin {margin:g} s does not fit a walltime of {seconds} s",
            "give a longer walltime (more than a minute), or a smaller lifetime_margin",
        )
    if o.runtime:  # before anything is made or submitted
        runtimes.check_has(site, o.runtime)
    if o.image:  # an image the runtime takes (a SIF is not podman-hpc's)
        runtimes.check_image(str(o.image), runtimes.implied(site, o.runtime, o.image), site)
    cpus = o.cpus_per_worker
    threads = cpus or (max(1, (site.cpu_cores or 1) // wpn) if kind == "cpu" else 1)
    return Pool(
        name=name,
        kind=kind,
        workers_per_node=int(wpn),
        nodes_per_job=int(nodes),  # type: ignore[arg-type]
        walltime=wall,
        walltime_seconds=seconds,
        account=o.account,
        queue=o.queue,
        image=o.image,
        runtime=o.runtime,
        launcher=o.launcher,
        directives=tuple(o.job_directives or ()),
        setup=tuple(o.job_setup or ()),
        env={str(k): str(v) for k, v in (o.job_env or {}).items()},
        worker_args=tuple(str(a) for a in args),
        lifetime_margin=margin,
        lifetime_stagger=stagger,
        threads_guess=int(threads),
        cpus_per_worker=cpus,
        memory_per_worker=o.memory_per_worker,  # type: ignore[arg-type]
        gpus_per_node=o.gpus_per_node,
    )


def dask_lifetime(args: list[str]) -> tuple[list[str], tuple[str, str | None] | None]:
    """``args`` without Dask's worker-lifetime options, and (``--lifetime``,
    ``--lifetime-stagger``) where given: dask-jobqueue's ``worker_extra_args=["--lifetime",
    "55m", "--lifetime-stagger", "4m"]``, which start-cluster does not take (the cluster sets
    Dask's lifetime itself, from the walltime)."""
    found: dict[str, str] = {}
    rest: list[str] = []
    items = iter(args)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name in ("--lifetime-restart", "--no-lifetime-restart"):
            raise UsageError(
                f"worker_args {name}: the cluster replaces a job's workers with a new job",
                "drop it (Dask's lifetime restart is off in HPCCluster's jobs)",
            )
        if name in ("--lifetime", "--lifetime-stagger"):
            found[name] = value if eq else next(items, "")
        else:
            rest.append(arg)
    if not found:
        return rest, None
    if "--lifetime" not in found:
        raise UsageError(
            "worker_args --lifetime-stagger without --lifetime",
            "give both (dask-jobqueue's recipe: --lifetime 55m --lifetime-stagger 4m), or "
            "lifetime_margin",
        )
    return rest, (found["--lifetime"], found.get("--lifetime-stagger"))


def lifetime_as_margin(
    lifetime: tuple[str, str | None], seconds: int, walltime: str, margin: object
) -> tuple[float, float | None]:
    """(lifetime margin, stagger) from Dask's ``--lifetime`` and ``--lifetime-stagger``: the
    workers retire after ``lifetime`` +- ``stagger``, which must end before the walltime."""
    from dask.utils import parse_timedelta

    texts = {"--lifetime": lifetime[0], "--lifetime-stagger": lifetime[1] or "0s"}
    values: dict[str, float] = {}
    for option, text in texts.items():
        try:
            values[option] = float(parse_timedelta(text, default="s"))
        except (ValueError, TypeError, KeyError):
            problem = f"worker_args {option} {text!r} is not a duration"
            raise UsageError(problem, "e.g. 55m") from None
    duration, stagger = values["--lifetime"], values["--lifetime-stagger"]
    if not 0 <= stagger < duration or duration + stagger >= seconds:
        raise UsageError(
            f"worker_args --lifetime {texts['--lifetime']} --lifetime-stagger "
            f"{texts['--lifetime-stagger']}: workers would retire after the walltime {walltime} "
            "ends their job",
            "give a lifetime plus stagger under the walltime",
        )
    if margin is not None and float(margin) != seconds - duration:  # type: ignore[arg-type]
        raise UsageError(
            "worker_args --lifetime and lifetime_margin disagree", "give one of them"
        )
    return seconds - duration, stagger if lifetime[1] is not None else None


def check_worker_args(args: Sequence[str]) -> None:
    """Refuse now what every job's start-cluster would refuse (an option it does not take)."""
    from ..cli import parse

    try:
        parse(["cpu", "1", *args])
    except UsageError as error:
        raise UsageError(
            f"worker_args: {error.problem}",
            "they are start-cluster's options (start-cluster --help)",
        ) from None
