"""Turn the command line's settings (``settings.Settings``) and the environment into a plan:
what this rank starts, and how.

Everything here is decided before anything starts, so bad input fails with nothing running,
and ``--dry-run`` prints exactly what a real run would do. The parts it asks: ``paths`` (where
the files go), ``network`` (addresses, ports, TLS), ``worker_kind`` (GPUs, worker class),
``scaling`` (timeouts and limits for the cluster's size).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import config
from ..errors import UsageError
from ..guard import import_path, private
from ..guard.connection import read_scheduler_file
from . import binding, gpus, launchers, network, paths, resources, worker_kind
from .scaling import hung_timeout, poll_max_interval, scale_needs
from .settings import Settings
from .sites import Site, detect_site, load_site

NO_LOCAL_STORAGE_ENV = {
    "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__SPILL": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "0.8",
    "DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE": "0.95",
}


@dataclass
class ProcessSpec:
    """One scheduler or worker process: its keyword arguments and its extra environment."""

    role: str  # "scheduler" or "worker"
    name: str
    options: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        """The equivalent ``dask scheduler`` / ``dask worker`` / ``dask cuda worker`` line."""
        options = dict(self.options)
        cuda = options.pop("cuda", None)
        options.pop("keep_cpus", None)
        argv = ["dask", "cuda", "worker"] if options.pop("worker_class", "") == "dask_cuda" else []
        argv = argv or ["dask", self.role]
        for key, value in {**options, **(cuda or {})}.items():
            if value is None or value is False and key.startswith("enable_"):
                continue
            flag = "--" + key.replace("_", "-")
            if key == "resources":
                argv += [flag, " ".join(f"{k}={v}" for k, v in value.items())]
            elif isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            else:
                argv += [flag, str(value)]
        return argv


def shared_env(specs: list[ProcessSpec]) -> dict[str, str]:
    """The variables every worker of this rank has, with the same value."""
    first, *rest = specs
    return {k: v for k, v in first.env.items() if all(s.env.get(k) == v for s in rest)}


@dataclass
class Plan:
    """Everything this rank will do."""

    rank: launchers.RankInfo
    site: Site
    worker_type: str
    workers_per_node: int
    layout: str  # "local", "worker-per-rank" or "workers-per-node"
    join: bool  # only workers, joining a running cluster
    nodes: int
    total_workers: int
    cluster_dir: Path
    scheduler_file: Path
    local_base: Path  # each rank makes its private local directory in it
    tls: bool
    protocol: str
    timeout: float
    leave_timeout: float  # for the workers to close, then for the other ranks to exit
    open_files: int  # file descriptors this rank's processes need (see scale_needs)
    poll_interval: float
    poll_max_interval: float
    command: list[str] | None
    jupyter: bool
    processes: list[ProcessSpec]
    notes: list[str]
    abort_on_node_loss: bool = False  # rank 0 stops the cluster when a rank is lost
    widen_cpus: frozenset[int] | None = None  # this rank's affinity, set before it forks
    exit_status_file: str | None = None  # rank 0 writes its exit status there
    hung_timeout: float | None = None  # a rank silent this long is given up (None: never)
    # Where the user started this rank: COMMAND runs there and JupyterLab serves its files.
    # Our own processes work in the rank's private local directory instead (cli.main).
    user_directory: Path = field(default_factory=Path.cwd)

    @property
    def runs_scheduler(self) -> bool:
        return any(p.role == "scheduler" for p in self.processes)

    def worker_names(self, rank: int) -> list[str]:
        """The names of the workers rank ``rank`` of this launch starts (not ``--join``'s)."""
        here = 1 if self.layout == "worker-per-rank" else self.workers_per_node
        return [worker_name(rank, i, here) for i in range(here)]

    def describe(self) -> dict[str, Any]:
        """The plan as plain data (what ``--dry-run`` prints)."""
        return {
            "launcher": self.rank.launcher,
            "rank": asdict(self.rank),
            "site": self.site.name,
            "worker_type": self.worker_type,
            "layout": self.layout,
            "join": self.join,
            "nodes": self.nodes,
            "workers_per_node": self.workers_per_node,
            "total_workers": self.total_workers,
            "scheduler_file": str(self.scheduler_file),
            "cluster_directory": str(self.cluster_dir),
            "local_directory": f"{self.local_base}/dask-hpc-* (new, private, at start)",
            "tls": self.tls,
            "protocol": self.protocol,
            "timeout": self.timeout,
            "open_files": self.open_files,
            "command": self.command,
            "jupyter": self.jupyter,
            "abort_on_node_loss": self.abort_on_node_loss,
            "hung_timeout": self.hung_timeout,
            "widen_cpus": resources.format_cpu_list(self.widen_cpus) if self.widen_cpus else None,
            "processes": [
                {
                    "role": p.role,
                    "name": p.name,
                    "argv": p.argv(),
                    "env": p.env,
                    "options": {k: v for k, v in p.options.items() if v is not None},
                }
                for p in self.processes
            ],
            "notes": self.notes,
        }


def worker_name(rank: int, index: int, workers_here: int) -> str:
    """A worker's name: its rank, and its index when the rank starts several (``2``, ``2-0``)."""
    return f"{rank}-{index}" if workers_here > 1 else str(rank)


def _layout(rank: launchers.RankInfo, wpn: int) -> tuple[str, int, int]:
    """(layout, nodes, workers started by this rank)."""
    if rank.launcher == "none":
        return "local", 1, wpn
    if rank.local_size == wpn:
        if rank.size % wpn:
            raise UsageError(
                f"{rank.size} ranks in all is not a multiple of WORKERS_PER_NODE {wpn}",
                f"launch {wpn} ranks on every node",
            )
        return "worker-per-rank", rank.size // wpn, 1
    if rank.local_size == 1:
        return "workers-per-node", rank.size, wpn
    raise UsageError(
        f"this node runs {rank.local_size} ranks but WORKERS_PER_NODE is {wpn}",
        f"give WORKERS_PER_NODE {rank.local_size} (one worker per rank), or launch "
        + (
            f"{wpn} ranks per node (one worker each) or 1 rank per node (it starts {wpn} workers)"
            if wpn > 1
            else "1 rank per node"
        ),
    )


def _absolute(path: str | None) -> str | None:
    """``path`` from the working directory at planning (the rank works elsewhere later)."""
    return os.path.abspath(path) if path else None


def private_local_directory(plan: Plan) -> Path:
    """This rank's own local directory, new (``mkdtemp``, 0700) in the plan's base: its workers'
    and its scheduler's scratch space. A fixed name there (``dask-scratch-space``, as Dask's
    default, or one per user) is one another user of the node can make first; Dask puts it on
    the workers' ``sys.path``."""
    path = private.private_temporary_directory(
        plan.local_base, "dask-hpc-", "local directory", paths.LOCAL_FIX, plan.site.node_scratch()
    )
    for spec in plan.processes:
        if spec.role == "worker":
            spec.options["local_directory"] = str(path)
        else:  # Dask's scheduler takes its work directory from this setting
            spec.env["DASK_TEMPORARY_DIRECTORY"] = config.env_value(str(path))
    return path


def _scheduler_spec(
    settings: Settings, rank: launchers.RankInfo, host_ip: str | None, protocol: str
) -> ProcessSpec:
    host = host_ip or ("127.0.0.1" if rank.launcher == "none" else None)
    port = settings.scheduler_port
    if port is None:
        port = int(config.get("scheduler-port"))
    if not 0 <= port < 65536:
        raise UsageError(
            f"--scheduler-port {port} is not a port number", "use 1-65535, or 0 for a free one"
        )
    network.check_port_free(host or "", port, "--scheduler-port")
    dashboard = settings.dashboard_address or config.get("dashboard-address")
    dash_host, dash_port = network.parse_dashboard(dashboard)
    if settings.dashboard_address:
        network.check_port_free(dash_host, dash_port, "--dashboard-address")
    options = {"host": host, "port": port, "protocol": protocol, "dashboard_address": dashboard}
    return ProcessSpec("scheduler", "scheduler", options)


def _check_command(settings: Settings, rank: launchers.RankInfo) -> None:
    if settings.name_prefix is not None and (
        not settings.join or not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*", settings.name_prefix)
    ):
        raise UsageError(
            f"--name-prefix {settings.name_prefix!r} needs --join and letters, digits, '.', "
            "'_', '-'",
            "e.g. --join FILE --name-prefix job-12",
        )
    if settings.join and settings.command:
        raise UsageError(
            "--join starts only workers and cannot run a COMMAND",
            "run COMMAND where the cluster was started",
        )
    if not rank.is_first or settings.join:
        return
    name = settings.command[0] if settings.command else ""
    if "/" in name and os.path.isfile(name) and not os.access(name, os.X_OK):
        raise UsageError(
            f"command {name!r} is not executable",
            f"chmod +x {name}, or run it with its interpreter, e.g. -- python {name}",
        )
    if settings.command and shutil.which(settings.command[0]) is None:
        raise UsageError(
            f"command {settings.command[0]!r} not found", "check the name, or give its full path"
        )
    if settings.jupyter and import_path.program("jupyter") is None:
        raise UsageError(
            "--jupyter needs JupyterLab, which is not installed",
            "pip install '.[jupyter]' in dask-hpc's checkout",
        )


def _check_join(path: Path) -> None:
    """``--join``'s file: a running cluster's scheduler file, and the user's own (another
    user's is an ``UnsafePath``, from ``read_scheduler_file``)."""
    if read_scheduler_file(path) is None:
        what = "not a usable scheduler file (unreadable, not one, or its certificates gone)"
        raise UsageError(
            f"--join {path}: {what if path.exists() else 'no such scheduler file'}",
            "give the scheduler file of a running cluster",
        )


def make_plan(
    settings: Settings,
    env: Mapping[str, str] | None = None,
    node: resources.NodeResources | None = None,
    gpu_root: Path = Path("/"),
) -> Plan:
    """Validate everything and decide what this rank starts."""
    env = os.environ if env is None else env
    notes: list[str] = []
    host = socket.gethostname()
    rank = launchers.detect(env, settings.launcher, pid=os.getpid(), host=host)
    site_name = settings.site or config.get("site")
    site = load_site(site_name) if site_name else detect_site(env, host)
    wpn = settings.workers_per_node
    layout, nodes, workers_here = _layout(rank, wpn)
    node = node or resources.detect()
    if settings.join:
        _check_join(Path(settings.join).expanduser())
    tls, protocol = network.tls_and_protocol(settings, notes)
    host_ip = network.host_address(settings, site, notes)
    cluster_dir, scheduler_file = paths.cluster_paths(settings, site, rank, env)
    if not settings.join:
        paths.check_cluster_paths(cluster_dir, scheduler_file, rank.is_first)
    _check_command(settings, rank)

    # What every worker of this rank shares.
    cpus = binding.choose_cpus(
        launchers.by_name(rank.launcher), env, node, workers_here, rank.local_size
    )
    if cpus.note:
        notes.append(cpus.note)
    usable = resources.quota_cpus(len(cpus.cpus)) if cpus.widen else node.usable_cpus
    total = nodes * wpn
    scale = scale_needs(total, rank.size, workers_here, usable, env)
    worker_env: dict[str, str] = {**site.worker_env, **scale.env, **scale.worker_env}
    if not site.node_local_storage:
        worker_env.update(NO_LOCAL_STORAGE_ENV)
        notes.append(
            f"{site.name} has no node-local storage: spilling off, pause at 80%, terminate at 95%"
        )
    gpu_node = None
    if settings.worker_type == "gpu":
        gpu_node = worker_kind.gpu_node(env, site, wpn, workers_here, gpu_root, notes)
    nanny = bool(config.get("nanny") if settings.nanny is None else settings.nanny)
    options = {
        "scheduler_file": str(scheduler_file),
        "nthreads": settings.nthreads or max(1, usable // (1 if cpus.keep else wpn)),
        "memory_limit": resources.worker_memory_limit(settings.memory_limit, node.memory, wpn),
        "resources": {**({"GPU": 1} if gpu_node else {}), **(settings.resources or {})} or None,
        "local_directory": None,  # made at start: private_local_directory
        "death_timeout": settings.death_timeout or scale.start_timeout,
        "host": host_ip,
        "protocol": protocol,
        "nanny": nanny,
        "worker_class": worker_kind.worker_class(settings, gpu_node, nanny, notes),
        "keep_cpus": cpus.keep,  # the launcher's CPU binding wins over dask-cuda's NVML guess
    }
    if options["worker_class"] == "dask_cuda":
        options["cuda"] = {
            "device_memory_limit": settings.device_memory_limit or "default",
            "rmm_pool_size": settings.rmm_pool_size,
            "enable_cudf_spill": settings.enable_cudf_spill,
        }

    processes: list[ProcessSpec] = []
    if rank.is_first and not settings.join:
        processes.append(_scheduler_spec(settings, rank, host_ip, protocol))
        processes[0].env.update(scale.env)
    first_index = rank.local_rank if layout == "worker-per-rank" else 0
    for i in range(workers_here):
        env_i = dict(worker_env)
        if gpu_node is not None:
            env_i.update(gpus.worker_gpu_env(gpu_node, first_index + i, workers_here))
        name = worker_name(rank.rank, i, workers_here)
        if settings.join:
            name = f"{settings.name_prefix or 'join-' + rank.launch_id}-{name}"
        processes.append(ProcessSpec("worker", name, dict(options), env_i))

    return Plan(
        rank=rank,
        site=site,
        worker_type=settings.worker_type,
        workers_per_node=wpn,
        layout=layout,
        join=bool(settings.join),
        nodes=nodes,
        total_workers=total,
        cluster_dir=cluster_dir,
        scheduler_file=scheduler_file,
        local_base=paths.local_base(settings, site, env),
        tls=tls,
        protocol=protocol,
        timeout=settings.timeout or scale.timeout,
        leave_timeout=scale.leave_timeout,
        open_files=(
            scale.open_files_first if rank.is_first and not settings.join else scale.open_files
        ),
        poll_interval=float(config.get("poll-interval")),
        poll_max_interval=float(config.get("poll-max-interval") or poll_max_interval(rank.size)),
        command=settings.command,
        jupyter=settings.jupyter,
        processes=processes,
        notes=notes,
        abort_on_node_loss=bool(
            config.get("abort-on-node-loss")
            if settings.abort_on_node_loss is None
            else settings.abort_on_node_loss
        ),
        exit_status_file=_absolute(config.get("exit-status-file")),
        hung_timeout=hung_timeout(),
        widen_cpus=cpus.cpus if cpus.widen else None,
    )
