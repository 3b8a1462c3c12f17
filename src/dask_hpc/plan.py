"""Turn the command line and the environment into a plan: what this rank starts, and how.

Everything here is decided before anything starts, so bad input fails with nothing running,
and ``--dry-run`` prints exactly what a real run would do.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dask.config
import psutil
from dask.utils import parse_bytes, parse_timedelta

from . import binding, config, gpus, launchers, resources
from .errors import UsageError
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

    @property
    def runs_scheduler(self) -> bool:
        return any(p.role == "scheduler" for p in self.processes)

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
            "tls": self.tls,
            "protocol": self.protocol,
            "timeout": self.timeout,
            "open_files": self.open_files,
            "command": self.command,
            "jupyter": self.jupyter,
            "abort_on_node_loss": self.abort_on_node_loss,
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
        f"launch {wpn} ranks per node (one worker each) or 1 rank per node "
        f"(it starts {wpn} workers)",
    )


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name``, or a UsageError listing the others."""
    addrs = psutil.net_if_addrs()
    for addr in addrs.get(name, []):
        if addr.family == socket.AF_INET:
            return addr.address
    raise UsageError(
        f"network interface {name!r} has no IPv4 address on this node",
        f"use one of: {', '.join(sorted(addrs))}",
    )


def _memory_limit(text: str | None, node_memory: int, share: int) -> int:
    if text is None:
        return node_memory // share
    try:
        value = float(text)
        if 0 < value <= 1:
            return int(node_memory * value)
        raise ValueError
    except ValueError:
        pass
    try:
        limit = parse_bytes(text)
    except (ValueError, TypeError):
        limit = 0
    if limit <= 0:
        raise UsageError(
            f"--memory-limit {text!r} is not a memory size",
            "write it like 16GB, 512MiB, or a fraction of the node such as 0.25",
        )
    return limit


def _usable_directory(path: Path, what: str, flag: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".probe-")
        probe.close()
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise UsageError(
            f"{what} {path} is not usable ({reason.lower()})",
            f"pass {flag} with a writable directory",
        ) from None
    return path


def _check_port_free(host: str, port: int, flag: str) -> None:
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {port} on {host or 'all interfaces'} is already in use",
                    f"pass another {flag}, or 0 for a free one",
                ) from None
            raise UsageError(
                f"cannot listen on {host}:{port} ({error.strerror})", f"pass another {flag}"
            ) from None


def _parse_dashboard(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise UsageError(
            f"--dashboard-address {address!r} has no port",
            "write it as HOST:PORT, e.g. 127.0.0.1:8787 (':0' for a free port)",
        )
    return host, int(port)


def _cluster_paths(
    args: argparse.Namespace, site: Site, rank: launchers.RankInfo, env: Mapping[str, str]
) -> tuple[Path, Path]:
    """(cluster directory, scheduler file) for this launch."""
    if args.join:
        file = Path(args.join).expanduser().absolute()
        return file.parent, file
    if args.scheduler_file:
        file = Path(args.scheduler_file).expanduser().absolute()
        return file.parent / f"{file.stem}.dask-hpc", file
    base = config.get("scheduler-directory") or site.expand(site.scheduler_directory, env)
    if not base:
        base = str(Path.home() / ".dask-hpc")
    directory = Path(base).expanduser().absolute() / f"dask-hpc-{rank.launch_id}"
    return directory, directory / "scheduler.json"


def _security(args: argparse.Namespace, notes: list[str]) -> tuple[bool, str]:
    """(TLS on?, protocol), refusing combinations that would send plain text by accident."""
    tls = bool(config.get("tls") if args.tls is None else args.tls)
    if not tls:
        notes.append("TLS is off: anyone who can reach the scheduler can run code as you")
    protocol = args.protocol or config.get("protocol") or ("tls" if tls else "tcp")
    if tls and protocol != "tls":
        raise UsageError(
            f"--protocol {protocol} sends everything unencrypted while TLS is on",
            "drop --protocol, or add --no-tls",
        )
    if not tls and protocol == "tls":
        raise UsageError("--protocol tls needs TLS", "drop --no-tls")
    return tls, protocol


def _host_address(args: argparse.Namespace, site: Site, notes: list[str]) -> str | None:
    """The IP to listen on: an explicit interface must exist, a site's default only if it does."""
    if args.interface:
        return interface_address(args.interface)
    if site.network_interface:
        if site.network_interface in psutil.net_if_addrs():
            return interface_address(site.network_interface)
        notes.append(
            f"site interface {site.network_interface} is not on this node: using the default route"
        )
    return None


def _local_directory(args: argparse.Namespace, site: Site, env: Mapping[str, str]) -> Path:
    text = args.local_directory or site.expand(site.local_directory, env)
    if text is None:
        text = os.path.join(tempfile.gettempdir(), f"dask-hpc-{os.getuid()}")
    return _usable_directory(Path(text).expanduser(), "local directory", "--local-directory")


def _gpu_node(
    env: Mapping[str, str],
    site: Site,
    wpn: int,
    workers_here: int,
    gpu_root: Path,
    notes: list[str],
) -> gpus.GpuNode:
    """The node's GPUs, checked to hold one device per worker."""
    node = gpus.gpu_node(env, site.gpu_vendor, site.gpu_count, site.gpu_tiles, wpn, gpu_root)
    capacity = len(node.devices)
    keeps_launcher_device = node.narrowed and capacity == 1 and workers_here == 1
    if wpn > capacity and not keeps_launcher_device:
        unit = "tiles" if node.extra_env.get("ZE_FLAT_DEVICE_HIERARCHY") == "FLAT" else "GPUs"
        raise UsageError(
            f"{wpn} gpu workers per node need {wpn} {node.vendor.name} devices, "
            f"but this node has {capacity} {unit} ({node.source})",
            node.capacity_hint(),
        )
    notes.append(f"{node.vendor.runtime} devices from the {node.source}: {','.join(node.devices)}")
    return node


def _worker_class(
    args: argparse.Namespace, gpu_node: gpus.GpuNode | None, nanny: bool, notes: list[str]
) -> str:
    cuda_flags = [
        flag
        for flag, value in (
            ("--device-memory-limit", args.device_memory_limit),
            ("--rmm-pool-size", args.rmm_pool_size),
            ("--enable-cudf-spill", args.enable_cudf_spill),
        )
        if value
    ]
    nvidia = gpu_node is not None and gpu_node.vendor.name == "nvidia"
    if cuda_flags and not (nvidia and _has_dask_cuda()):
        raise UsageError(
            f"{cuda_flags[0]} is a dask-cuda option, for gpu workers on NVIDIA GPUs",
            "drop it, or run gpu workers with dask-cuda installed "
            "(pip install '.[cuda]' in dask-hpc's checkout)",
        )
    if not nvidia:
        return "distributed.Worker"
    if not _has_dask_cuda():
        notes.append(
            "dask-cuda is not installed: plain Dask workers pinned with CUDA_VISIBLE_DEVICES "
            "(pip install '.[cuda]' in dask-hpc's checkout)"
        )
        return "distributed.Worker"
    if not nanny:
        raise UsageError(
            "dask-cuda workers always run under a Nanny (as `dask cuda worker` does)",
            "drop --no-nanny",
        )
    if args.rmm_pool_size and not _importable("rmm"):
        raise UsageError(
            "--rmm-pool-size needs RMM, which is not installed here",
            "install rmm (pip install rmm-cu12, or the site image), or drop --rmm-pool-size",
        )
    return "dask_cuda"


def _scheduler_spec(
    args: argparse.Namespace, rank: launchers.RankInfo, host_ip: str | None, protocol: str
) -> ProcessSpec:
    host = host_ip or ("127.0.0.1" if rank.launcher == "none" else None)
    port = args.scheduler_port
    if port is None:
        port = int(config.get("scheduler-port"))
    if not 0 <= port < 65536:
        raise UsageError(
            f"--scheduler-port {port} is not a port number", "use 1-65535, or 0 for a free one"
        )
    _check_port_free(host or "", port, "--scheduler-port")
    dashboard = args.dashboard_address or config.get("dashboard-address")
    dash_host, dash_port = _parse_dashboard(dashboard)
    if args.dashboard_address:
        _check_port_free(dash_host, dash_port, "--dashboard-address")
    options = {"host": host, "port": port, "protocol": protocol, "dashboard_address": dashboard}
    return ProcessSpec("scheduler", "scheduler", options)


def _check_command(args: argparse.Namespace, rank: launchers.RankInfo) -> None:
    if args.name_prefix is not None and (
        not args.join or not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*", args.name_prefix)
    ):
        raise UsageError(
            f"--name-prefix {args.name_prefix!r} needs --join and letters, digits, '.', '_', '-'",
            "e.g. --join FILE --name-prefix job-12",
        )
    if args.join and args.command:
        raise UsageError(
            "--join starts only workers and cannot run a COMMAND",
            "run COMMAND where the cluster was started",
        )
    if not rank.is_first or args.join:
        return
    if args.command and shutil.which(args.command[0]) is None:
        raise UsageError(
            f"command {args.command[0]!r} not found", "check the name, or give its full path"
        )
    if args.jupyter and shutil.which("jupyter") is None:
        raise UsageError(
            "--jupyter needs JupyterLab, which is not installed",
            "pip install '.[jupyter]' in dask-hpc's checkout",
        )


def make_plan(
    args: argparse.Namespace,
    env: Mapping[str, str] | None = None,
    node: resources.NodeResources | None = None,
    gpu_root: Path = Path("/"),
) -> Plan:
    """Validate everything and decide what this rank starts."""
    env = os.environ if env is None else env
    notes: list[str] = []
    host = socket.gethostname()
    rank = launchers.detect(env, args.launcher, pid=os.getpid(), host=host)
    site_name = args.site or config.get("site")
    site = load_site(site_name) if site_name else detect_site(env, host)
    wpn = args.workers_per_node
    layout, nodes, workers_here = _layout(rank, wpn)
    node = node or resources.detect()
    if args.join and not Path(args.join).expanduser().is_file():
        raise UsageError(
            f"--join {args.join}: no such scheduler file",
            "give the scheduler file of a running cluster",
        )
    tls, protocol = _security(args, notes)
    host_ip = _host_address(args, site, notes)
    cluster_dir, scheduler_file = _cluster_paths(args, site, rank, env)
    if rank.is_first and not args.join:
        _usable_directory(cluster_dir.parent, "scheduler directory", "--scheduler-file")
    _check_command(args, rank)

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
    if args.worker_type == "gpu":
        gpu_node = _gpu_node(env, site, wpn, workers_here, gpu_root, notes)
    nanny = bool(config.get("nanny") if args.nanny is None else args.nanny)
    options = {
        "scheduler_file": str(scheduler_file),
        "nthreads": args.nthreads or max(1, usable // (1 if cpus.keep else wpn)),
        "memory_limit": _memory_limit(args.memory_limit, node.memory, wpn),
        "resources": {**({"GPU": 1} if gpu_node else {}), **(args.resources or {})} or None,
        "local_directory": str(_local_directory(args, site, env)),
        "death_timeout": args.death_timeout or scale.start_timeout,
        "host": host_ip,
        "protocol": protocol,
        "nanny": nanny,
        "worker_class": _worker_class(args, gpu_node, nanny, notes),
        "keep_cpus": cpus.keep,  # the launcher's CPU binding wins over dask-cuda's NVML guess
    }
    if options["worker_class"] == "dask_cuda":
        options["cuda"] = {
            "device_memory_limit": args.device_memory_limit or "default",
            "rmm_pool_size": args.rmm_pool_size,
            "enable_cudf_spill": args.enable_cudf_spill,
        }

    processes: list[ProcessSpec] = []
    if rank.is_first and not args.join:
        processes.append(_scheduler_spec(args, rank, host_ip, protocol))
        processes[0].env.update(scale.env)
    first_index = rank.local_rank if layout == "worker-per-rank" else 0
    for i in range(workers_here):
        env_i = dict(worker_env)
        if gpu_node is not None:
            env_i.update(gpus.worker_gpu_env(gpu_node, first_index + i, workers_here))
        name = f"{rank.rank}-{i}" if workers_here > 1 else str(rank.rank)
        if args.join:
            name = f"{args.name_prefix or 'join-' + rank.launch_id}-{name}"
        processes.append(ProcessSpec("worker", name, dict(options), env_i))

    return Plan(
        rank=rank,
        site=site,
        worker_type=args.worker_type,
        workers_per_node=wpn,
        layout=layout,
        join=bool(args.join),
        nodes=nodes,
        total_workers=total,
        cluster_dir=cluster_dir,
        scheduler_file=scheduler_file,
        tls=tls,
        protocol=protocol,
        timeout=args.timeout or scale.timeout,
        leave_timeout=scale.leave_timeout,
        open_files=scale.open_files_first if rank.is_first and not args.join else scale.open_files,
        poll_interval=float(config.get("poll-interval")),
        poll_max_interval=float(config.get("poll-max-interval") or poll_max_interval(rank.size)),
        command=args.command,
        jupyter=args.jupyter,
        processes=processes,
        notes=notes,
        abort_on_node_loss=bool(
            config.get("abort-on-node-loss")
            if args.abort_on_node_loss is None
            else args.abort_on_node_loss
        ),
        exit_status_file=config.get("exit-status-file") or None,
        widen_cpus=cpus.cpus if cpus.widen else None,
    )


# What rank 0 holds per worker and per rank (measured with benchmarks/scale.py: ~2.2 file
# descriptors per worker in the scheduler, a roll-call connection per rank), with headroom for
# the connections a running cluster opens (gathers, clients, the dashboard).
FDS_PER_WORKER = 4
FDS_PER_NANNY = 12  # a nanny host's Nanny: its listener, scheduler comms, pipes to its worker
FDS_BASE = 1024

# Timeouts Dask applies per connection and per start, raised with the cluster's size. W workers
# connecting at once queue their TLS handshakes on the scheduler's single event loop
# (benchmarks/scale.py, 2 cores: ~10 ms each, and a handshake not done within Dask's first try,
# a fifth of the connect timeout, is dropped and retried, which adds load: at 500 workers with
# the default 30 s, dozens failed); a node's workers start one after another on its CPUs.
# Dask's fixed defaults (connect 30 s, start 60 s, worker TTL 300 s) are what failed first at
# 208 workers on 2 cores, and at 1,300 and 5,500 workers on real machines (dask-mpi#82,
# distributed#3691).
SECONDS_PER_WORKER = 0.02  # scheduler time per worker joining (2x the measured)
CONNECT_PER_WORKER = 5 * SECONDS_PER_WORKER  # Dask's first try gets a fifth of it
SECONDS_PER_LOCAL_WORKER_PER_CPU = 4.0  # a node's worker starts, per worker per usable CPU


@dataclass(frozen=True)
class ScaleNeeds:
    """What a cluster of this size needs from this rank: timeouts and file descriptors."""

    start_timeout: float  # a worker's (and its Nanny's) start: Dask's death_timeout
    connect_timeout: float  # distributed.comm.timeouts.connect (and .tcp)
    worker_ttl: float  # distributed.scheduler.worker-ttl
    timeout: float  # --timeout: the scheduler file, and every worker connected
    leave_timeout: float  # at the end: for the workers to close, then for the ranks to exit
    open_files: int  # this rank's processes
    open_files_first: int  # rank 0's, with the scheduler and the roll call
    env: dict[str, str]  # the Dask settings above, for the scheduler and the workers
    worker_env: dict[str, str]  # the workers' alone (an oversubscribed node's idle costs)


def scale_needs(
    workers: int,
    ranks: int,
    workers_here: int,
    cpus: int,
    env: Mapping[str, str] | None = None,
) -> ScaleNeeds:
    """Timeouts and file-descriptor needs derived from the expected worker count.

    Never below the configured values (hpc.timeout, hpc.death-timeout, Dask's own); a Dask
    setting the user put in the environment is left alone.
    """
    env = os.environ if env is None else env

    def seconds(key: str, default: str) -> float:  # Dask's default, if distributed's
        return float(parse_timedelta(dask.config.get(key, default), "s") or 0)  # not loaded

    joining = SECONDS_PER_WORKER * workers
    local = SECONDS_PER_LOCAL_WORKER_PER_CPU * workers_here / max(1, cpus)
    connect = max(
        seconds("distributed.comm.timeouts.connect", "30s"), CONNECT_PER_WORKER * workers + local
    )
    tcp = max(seconds("distributed.comm.timeouts.tcp", "30s"), joining + local)
    death = float(config.get("death-timeout"))
    start = max(death, 30 + connect)  # a start outlasts a connect's retries
    # Dask's heartbeat interval grows to W/200 + 1 s; TTL: ten missed heartbeats at least.
    ttl = max(seconds("distributed.scheduler.worker-ttl", "5 minutes"), 10 * (workers / 200 + 1))
    timeout = float(config.get("timeout")) + 2 * (start - death)
    dask_env = {
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": f"{connect:.0f}s",
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": f"{tcp:.0f}s",
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": f"{ttl:.0f}s",
    }
    over = workers_here / max(1, cpus)
    idle_env: dict[str, str] = {}
    if over > 1:
        # More workers than CPUs on this node (104 on a 2-core test machine, or a node shared
        # with other jobs): an idle worker's profiler wakes every 10 ms and its system monitor
        # every 0.5 s; measured 208 idle workers on 2 cores: the CPUs were saturated doing
        # nothing. Both slow down by the oversubscription, so the node pays what 1 worker per
        # CPU pays. So do the event loop's tick (every 20 ms) and the memory monitor (every
        # 100 ms, a /proc read): with only the first two slowed, 208 idle workers on 2 cores
        # still used both cores (~1% of a CPU each, py-spy: _measure_tick and memory_monitor).
        interval = min(1000, round(10 * over))
        idle_env["DASK_DISTRIBUTED__WORKER__PROFILE__INTERVAL"] = f"{interval}ms"
        idle_env["DASK_DISTRIBUTED__WORKER__PROFILE__CYCLE"] = f"{max(1000, 10 * interval)}ms"
        idle_env["DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL"] = f"{min(10, 0.5 * over):g}s"
        idle_env["DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL"] = f"{min(1000, round(20 * over))}ms"
        idle_env["DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL"] = (
            f"{min(1000, round(100 * over))}ms"
        )
    open_files = FDS_BASE + FDS_PER_NANNY * workers_here
    return ScaleNeeds(
        start_timeout=round(start),
        connect_timeout=round(connect),
        worker_ttl=round(ttl),
        timeout=round(timeout),
        # A node closes its workers one after another on its CPUs (measured: 104 Nannies on 2
        # shared cores needed more than 10 s), and rank 0 sees W removals.
        leave_timeout=round(10 + 0.5 * local + SECONDS_PER_WORKER * workers / 4),
        open_files=open_files,
        open_files_first=open_files + FDS_PER_WORKER * workers + ranks,
        env={k: v for k, v in dask_env.items() if k not in env},
        worker_env={k: v for k, v in idle_env.items() if k not in env},
    )


def poll_max_interval(ranks: int) -> float:
    """The cap of a rank's scheduler-file polling: all ranks together read it ~2000 times a
    second at most (0.1 s for up to 200 ranks, 2 s from 4000)."""
    return min(2.0, max(0.1, ranks / 2000))


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _has_dask_cuda() -> bool:
    return _importable("dask_cuda")
