"""Batch scripts: the site's batch system, its launcher, start-cluster on every rank.

The one source of job scripts: ``invoke job`` (a cluster that runs a COMMAND) and
``HPCCluster`` (jobs whose workers join a running cluster) both render them here, from the
batch-system and launcher tables (``systems.yaml``) and the site profile's batch lines.
Each rank runs inside the image when one is given (``apptainer exec``, Pyxis's
``srun --container-image`` or ``podman-hpc run``: the site's runtime, or one it also has:
``batch.runtimes``), else in the Python environment that rendered the script.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .. import config
from ..errors import UsageError
from ..guard import images, private
from ..planning.sites import Site, load_site
from . import clean_env, container, cpus, requests, rules, runtimes
from . import image as image_lines
from .launch import (  # noqa: F401  (launch_command, status_from_rank0: used from here too)
    apptainer_gpu_flag,
    data,
    launch_command,
    per_rank,
    start_cluster_argv,
    status_from_rank0,
)
from .templating import Template

WORKER_TYPES = ("cpu", "gpu")


def template(name: str) -> Template:
    """The job script template ``templates/NAME``."""
    return Template(resources.files(__package__).joinpath("templates", name).read_text())


@dataclass(frozen=True)
class JobRequest:
    """One batch job: ``invoke job`` (with a COMMAND) or an elastic cluster's job (``argv``)."""

    site: str
    nodes: int
    command: Sequence[str] = ()  # run once the cluster is up (start-cluster's COMMAND)
    workers_per_node: int | None = None
    worker_type: str | None = None
    walltime: str = "01:00:00"
    account: str | None = None
    queue: str | None = None
    image: str | None = None  # default: the site's (dask-hpc-SITE.sif), unless python is given
    job_name: str = "dask-hpc"
    output: str | None = None
    batch_system: str | None = None  # default: the site's
    launcher: str | None = None  # default: the site's, else the batch system's
    cluster_args: Sequence[str] = ()  # more start-cluster options (--join FILE ...)
    python: str | None = None  # without an image: ranks run ``PYTHON -P -m dask_hpc``
    program: Sequence[str] | None = None  # instead of start-cluster (a scheduler's job)
    env: Mapping[str, str] = field(default_factory=dict)  # exported before the launch
    directives: Sequence[str] = ()  # more header lines
    setup: Sequence[str] = ()  # more shell lines before the launch
    binds: Sequence[str] = ()  # paths apptainer exec binds (the cluster's directory)
    image_key: str | None = None  # the site's public key; default: hpc.image-key (issue 21)
    verify_image: bool = True  # False: the explicit opt-out of the image check (issue 21)
    gpus_per_node: int | None = None  # default: one per gpu worker (batch.requests)
    cpus_per_worker: int | None = None  # default: the node's CPUs shared out (batch.requests)
    memory_per_worker: str | int | None = None  # default: not asked (the batch system's default)
    runtime: str | None = None  # the image's container runtime; default: the site's (runtimes)
    image_group: str | None = None  # the group trusted with the image; default: hpc.image-group


def parse_walltime(text: str) -> int:
    """Seconds in ``HH:MM:SS``, ``HH:MM`` or plain minutes."""
    if re.fullmatch(r"\d+", text):
        return int(text) * 60
    m = re.fullmatch(r"(\d+):(\d{1,2})(?::(\d{1,2}))?", text)
    if not m:
        raise UsageError(f"bad walltime {text!r}", "write HH:MM:SS, HH:MM or minutes")
    h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if mi >= 60 or s >= 60:
        raise UsageError(f"bad walltime {text!r}", "minutes and seconds go up to 59")
    if h * 3600 + mi * 60 + s == 0:
        raise UsageError(f"bad walltime {text!r}", "a job needs more than no time")
    return h * 3600 + mi * 60 + s


def format_walltime(fmt: str, seconds: int) -> str:
    """``seconds`` in a batch system's walltime format (whole minutes are rounded up)."""
    minutes = -(-seconds // 60)
    return fmt.format(
        fsd=f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s",  # Flux's durations
        h=seconds // 3600,
        m=(seconds % 3600) // 60,
        s=seconds % 60,
        minutes=minutes,
        mh=minutes // 60,
        mm=minutes % 60,
    )


def system_table(name: str) -> Mapping[str, Any]:
    """The row of batch system ``name``, or a UsageError."""
    system = data()["batch_systems"].get(name)
    if not system:
        raise UsageError(
            f"no batch system {name!r}", f"use one of: {', '.join(data()['batch_systems'])}"
        )
    return system


def launcher_for(site: Site, batch_system: str, override: str | None = None) -> str:
    """The launcher of jobs on ``site`` under ``batch_system``: asked for, the site's, else the
    batch system's usual one (a plain Slurm cluster: srun)."""
    if override:
        rules.check_launcher(override, batch_system)  # never srun in a #PBS job
        return override
    if site.batch_system == batch_system and site.launcher != "none":
        return site.launcher
    return str(system_table(batch_system)["launcher"])


def check_image_place(image: str, group_name: str | None = None) -> None:
    """Refuse at once an image that exists here but others could change, beyond the members
    of ``group_name`` (default: ``hpc.image-group``) where it names one (the job would refuse
    it too, later, in its own words: batch.image)."""
    group: private.TrustedGroup | None = image_lines.trusted_group(group_name)
    refusal = image_lines.place_refusal(image, Path(image).expanduser(), group)
    if refusal:
        raise UsageError(*refusal)


def render(req: JobRequest) -> str:
    """The batch script for ``req`` on its site."""
    site = load_site(req.site)
    name = req.batch_system or site.batch_system
    if name == "none":
        raise UsageError(
            f"site {site.name} has no batch system",
            f"name one with --batch-system ({', '.join(data()['batch_systems'])}), or run "
            "start-cluster directly",
        )
    system = system_table(name)
    # The site's own batch lines are for its own batch system (not for one asked instead).
    own = site if name == site.batch_system else load_site("generic")
    if req.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, not {req.nodes}")
    if not req.command and not req.cluster_args and req.program is None:
        raise UsageError("no command to run", "give it after --, e.g. -- python job.py")
    worker_type = req.worker_type or ("gpu" if site.gpu_vendor else "cpu")
    if worker_type not in WORKER_TYPES:
        raise UsageError(f"unknown worker type {worker_type!r}", "use cpu or gpu")
    queue = req.queue if not own.batch_queue else None  # a QOS is no partition to ask about
    shape = requests.job_shape(
        site,
        system,
        kind=worker_type,
        workers_per_node=req.workers_per_node,
        gpus_per_node=req.gpus_per_node,
        cpus_per_worker=req.cpus_per_worker,
        memory_per_worker=req.memory_per_worker,
        worker_args=req.cluster_args,
        queue=queue,
    )
    seconds = parse_walltime(req.walltime)
    for option, value, example in (
        ("account", req.account, "MyProject"),
        ("queue", req.queue, "debug"),
        ("job-name", req.job_name, "dask-hpc"),
    ):
        rules.check_name(option, value, example)
    if own is site:  # the site's rules are its own batch system's
        rules.check_site_rules(
            site,
            system,
            account=req.account,
            queue=req.queue,
            walltime=seconds,
            directives=req.directives,
        )
    walltime = format_walltime(system["walltime"], seconds)
    given = req.image or (None if req.python else config.get("image"))  # the site's (role)
    runtime = runtimes.implied(site, req.runtime, given)
    image = given or (None if req.python else runtimes.default_image(site.image, runtime))
    if image or req.runtime:  # one the site has, and its launcher can start
        program = req.program is not None
        runtime = runtimes.choose(
            site, runtime, "none" if program else launcher_for(site, name, req.launcher)
        )

    def directive(fmt: str | None, *args: object, **kw: object) -> list[str]:
        return [system["directive"].format(fmt.format(*args, **kw))] if fmt else []

    lines = directive(system["name"], name=req.job_name)
    lines += requests.directives(system, own, shape, req.nodes, worker_type == "gpu")
    lines += directive(system.get("keep_on_node_loss"))
    lines += directive(system["time"], walltime=walltime)
    if req.account:
        lines += directive(system["account"], req.account)
    if req.queue:
        lines += directive(own.batch_queue or system["queue"], req.queue)  # e.g. a QOS
    lines += directive(system["output"], req.output or system["default_output"])
    lines += directive(system.get("join_output"))  # the ready block beside the ranks' lines
    lines += [system["directive"].format(d) for d in (*own.batch_directives, *req.directives)]
    setup = [*own.batch_setup, *req.setup]
    # the job's variables before the lines that read them (the ranks' mounts: a scheduler
    # directory given as DASK_HPC__SCHEDULER_DIRECTORY)
    setup += [f"export {k}={shlex.quote(str(v))}" for k, v in req.env.items()]
    binds: list[str] = []
    if image:  # settled once, before the launcher starts any rank (batch.image)
        runtimes.check_image(image, runtime, site)
        check_image_place(image, req.image_group)
        trust = images.configured_trust(req.image_key, None if req.verify_image else False)
        # with the site key: a SIF's signature, or a squashfs's signed sha256 (batch.image)
        setup += image_lines.lines(image, trust.key, group=req.image_group, runtime=runtime)
        if runtime == "apptainer":
            binds = container.bind_lines(site)  # its directories outside Apptainer's defaults
        else:  # Pyxis and podman mount nothing unasked
            binds = runtimes.mount_lines(site, req.binds, runtime)
        setup += binds
        if runtime == "pyxis":  # what Enroot's NVIDIA hook gives the container
            setup += runtimes.pyxis_gpu_lines(worker_type == "gpu")
    setup += clean_env.lines()  # last: after module loads, before anything the job starts
    if image and runtime == "podman-hpc":  # podman-hpc is Python: after the paths are clean
        gpu = worker_type == "gpu" and site.gpu_vendor == "nvidia"  # NERSC's --gpu module
        setup += runtimes.podman_lines(gpu and req.program is None, site.local_directory)
    if not image and req.program is None:  # what the ranks run is there, checked once
        setup += rules.runnable_lines(req.python)
    launch = _launch(req, site, name, shape, worker_type, image, bool(binds), runtime)
    where = "one container per rank" if image else "this Python environment on every rank"
    if req.program is not None:
        summary = f"# dask-hpc on {site.name}: the scheduler of an elastic cluster."
    else:
        summary = (
            f"# dask-hpc on {site.name}: {req.nodes} node(s) x {shape.per_node} {worker_type} "
            f"worker(s), {where}."
        )
    text = template(f"{name}.sh").substitute(
        directives="\n".join(lines),
        summary=summary,
        setup="\n".join(setup),
        launch=launch,
    )
    return re.sub(r"\n{3,}", "\n\n", text)


def site_placement(
    site: Site, launcher: str, batch_system: str, fields: dict[str, int | str], gpu: bool
) -> tuple[str, str]:
    """(launcher line's name, more launcher options): the site's own CPU and GPU maps where
    its own launcher runs the ranks (``batch.cpu_bind: list``, ``batch.gpu_bind``); adds the
    CPU lists to ``fields``."""
    if launcher != site.launcher or batch_system != site.batch_system:
        return launcher, ""
    if site.batch_cpu_bind == "list":  # the site's own CPU lists (batch.cpus)
        per_node = int(fields["per_node"])
        fields["cpu_lists"] = cpus.cpu_lists(
            per_node, site.cpu_cores or per_node, site.cpu_sockets, site.cpu_reserved, site.name
        )
        launcher = f"{launcher}-list"
    # e.g. srun --gpus-per-task=1 --gpu-bind=closest: each rank its own GPU, the nearest
    return launcher, (site.batch_gpu_bind or "") if gpu else ""


def _launch(
    req: JobRequest,
    site: Site,
    batch_system: str,
    shape: requests.Shape,
    worker_type: str,
    image: str | None,
    site_binds: bool,
    runtime: str = "apptainer",
) -> str:
    """The job's launch line: start-cluster on one rank per worker (or ``req.program`` once),
    placed on CPUs and GPUs as the site's guide does where its own launcher runs them."""
    gpu = worker_type == "gpu"
    fields: dict[str, int | str] = dict(shape.fields(req.nodes, gpu))
    options = ""
    if req.program is not None:  # one process on the job's first node
        launcher, argv = "none", list(req.program)
    else:
        launcher = launcher_for(site, batch_system, req.launcher)
        head = start_cluster_argv(None if image else req.python)
        argv = [*head, worker_type, str(shape.per_node), *req.cluster_args, *shape.worker_args]
        if site.name != "generic" and "--site" not in req.cluster_args:
            argv += ["--site", site.name]  # DeepOps nodes say nothing a rank could detect
        if req.command:
            argv += ["--", *req.command]
        launcher, options = site_placement(site, launcher, batch_system, fields, gpu)
    launch = launch_command(
        launcher=launcher,
        batch_system=batch_system,
        nodes=req.nodes,
        workers_per_node=shape.per_node,
        worker_type=worker_type,
        argv=argv,
        image=f'"${image_lines.VARIABLE}"' if image else None,  # what batch.image settled
        gpu_flag=apptainer_gpu_flag(site.gpu_vendor),
        binds=req.binds,
        fields=fields,
        options=options,
        site_binds=site_binds,
        runtime=runtime,
    )
    base = launcher.removesuffix("-list")
    wrapped = data()["mpi_candidates"].get(batch_system, []) if base == "mpi" else [base]
    if set(wrapped) & set(data()["status_from_rank0"]) and req.command:
        # the job's own EXIT trap (podman-hpc's store) kept beside rank 0's status file's
        on_exit = "dask_hpc_podman_clean" if image and runtime == "podman-hpc" else ""
        launch = status_from_rank0(launch, on_exit)
    return launch
