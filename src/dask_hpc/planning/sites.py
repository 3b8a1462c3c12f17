"""Site profiles: facts about each supercomputer, kept as YAML data files in ``sites/``."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ..errors import UsageError
from ..guard.namespaces import SYSTEM_STICKY

# Every rank reads every profile at start-up: use libyaml where it is there.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
BATCH_SYSTEMS = ("pbs", "lsf", "cobalt", "slurm", "flux", "none")
GPU_VENDORS = ("nvidia", "intel", "amd")
CPU_UNITS = ("threads", "cores")
GPU_ORDERS = ("local-rank", "reverse")  # reverse: local rank i gets GPU N-1-i (ALCF Polaris)
CPU_BINDS = ("launcher", "list")  # list: explicit lists of CPUs per rank (batch.cpus)
# How a job's ranks run its image: apptainer exec, srun --container-image (Pyxis over Enroot),
# podman-hpc run; a profile names its site's with where the site says so (container_runtime)
CONTAINER_RUNTIMES = ("apptainer", "pyxis", "podman-hpc")


@dataclass(frozen=True)
class DefaultQueue:
    """The queue (or QOS) a site's batch system puts a job in that names none, and its
    walltime limit (``batch.default_queue``: NERSC's debug QOS on Perlmutter)."""

    name: str
    walltime: str  # HH:MM:SS
    source: str  # where the site says so, and when it was read


@dataclass(frozen=True)
class Site:
    """One site profile (see ``sites/*.yaml``)."""

    name: str
    description: str
    batch_system: str
    launcher: str
    detect_env: Mapping[str, str]
    detect_hostname: str
    network_interface: str | None
    node_local_storage: bool
    local_directory: str | None
    scheduler_directory: str
    cpu_cores: int | None
    cpu_threads: int | None
    memory: str | None
    gpu_vendor: str | None
    gpu_count: int | None
    gpu_tiles: int
    worker_env: Mapping[str, str] = field(default_factory=dict)
    ssh_hops: tuple[str, ...] = ()  # login path (bastion, login node) for the printed tunnel
    retired: str | None = None  # when the machine was retired (its profile stays for its users)
    batch_directives: tuple[str, ...] = ()  # header lines every batch job here adds
    batch_setup: tuple[str, ...] = ()  # shell lines before the launch (modules)
    batch_queue: str | None = None  # how a queue is asked for, where not the batch system's way
    batch_requests: Mapping[str, str | None] = field(default_factory=dict)  # over systems.yaml's
    batch_cpu_unit: str = "threads"  # what the batch system counts as a CPU: threads or cores
    image: str | None = None  # the site's image file name; None: the job's own Python
    cpu_sockets: int = 1  # sockets of a node: ranks are shared out among them (batch.cpus)
    cpu_reserved: tuple[int, ...] = ()  # physical cores the site keeps for the system
    gpu_order: str = "local-rank"  # which GPU a rank's worker gets: local-rank, or reverse
    batch_cpu_bind: str = "launcher"  # how a launcher binds ranks: its own way, or list
    batch_gpu_bind: str | None = None  # launcher options that give each gpu rank its GPU
    batch_container: str | None = None  # why the site's jobs run no image (image: null)
    # A job must name the project it charges (batch.account): where the site says so, and when
    # it was read; None where a job may name none (the user's default project is charged).
    account_required: str | None = None
    default_queue: DefaultQueue | None = None  # batch.default_queue
    container_runtime: str = "apptainer"  # the runtime the site supports (CONTAINER_RUNTIMES)
    container_runtime_source: str | None = None  # where the site says so, and when it was read
    container_runtimes_also: tuple[str, ...] = ()  # others its nodes have (container_runtime.also)

    def matches(self, env: Mapping[str, str], hostname: str) -> bool:
        """True when this machine looks like this site."""
        for var, pattern in self.detect_env.items():
            if re.search(pattern, env.get(var, "")):
                return True
        return bool(self.detect_hostname) and re.search(self.detect_hostname, hostname) is not None

    def expand(self, path: str | None, env: Mapping[str, str]) -> str | None:
        """Expand ``$VAR`` in a profile path with ``env``; None if a variable is unset."""
        return expand_vars(path, env)

    def node_scratch(self) -> tuple[str, ...]:
        """The node's own sticky scratch directories, root's on every node of the site: the
        system's, and the profile's local directory where it names no variable (ALCF's
        /local/scratch; a user's own, /mnt/bb/$USER, needs no trust): what a user namespace
        that hides root may show as nobody's (``guard.namespaces``)."""
        local = self.local_directory
        own = (os.path.normpath(local),) if local and "$" not in local else ()
        return (*SYSTEM_STICKY, *own)


def expand_vars(path: str | None, env: Mapping[str, str]) -> str | None:
    """``path`` with its ``$VAR``s and ``${VAR}``s from ``env``; None if one is unset or empty
    (or ``path`` is None)."""
    if path is None:
        return None
    missing = [v for v in re.findall(r"\$\{?(\w+)\}?", path) if not env.get(v)]
    if missing:
        return None
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env[m.group(1)], path)


def _sourced(name: str, key: str, rule: Mapping[str, Any], *fields: str) -> str:
    """``SOURCE, read DATE`` of a rule of the profile: each one says where the site states it
    and when that was read, or the profile is refused."""
    missing = [f for f in ("source", "read", *fields) if not rule.get(f)]
    if missing:
        raise ValueError(f"site {name}: batch.{key} has no {', '.join(missing)}")
    return f"{rule['source']}, read {rule['read']}"


def _account_required(name: str, batch: Mapping[str, Any]) -> str | None:
    rule = batch.get("account") or {}
    return _sourced(name, "account", rule) if rule.get("required") else None


def _default_queue(name: str, batch: Mapping[str, Any]) -> DefaultQueue | None:
    rule = batch.get("default_queue")
    if not rule:
        return None
    source = _sourced(name, "default_queue", rule, "name", "walltime")
    return DefaultQueue(str(rule["name"]), str(rule["walltime"]), source)


def _container_runtime(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The site's ``container_runtime`` fields: Apptainer unless the profile names another,
    with where the site says so, and any other runtime its nodes have (``also``)."""
    rule = data.get("container_runtime")
    if not rule:
        return {}
    missing = [f for f in ("name", "source", "read") if not rule.get(f)]
    if missing:
        raise ValueError(f"site {name}: container_runtime has no {', '.join(missing)}")
    source = f"{rule['source']}, read {rule['read']}"
    also = tuple(str(r) for r in rule.get("also") or ())
    for runtime in (rule["name"], *also):
        if runtime not in CONTAINER_RUNTIMES:
            raise ValueError(f"site {name}: unknown container_runtime {runtime!r}")
    return {
        "container_runtime": str(rule["name"]),
        "container_runtime_source": source,
        "container_runtimes_also": also,
    }


def _from_mapping(data: Mapping[str, Any]) -> Site:
    cpu = data.get("cpu") or {}
    gpu = data.get("gpu") or {}
    detect = data.get("detect") or {}
    batch = data.get("batch") or {}
    site = Site(
        name=data["name"],
        description=data["description"],
        batch_system=data["batch_system"],
        launcher=data["launcher"],
        detect_env=dict(detect.get("env") or {}),
        detect_hostname=detect.get("hostname") or "",
        network_interface=data.get("network_interface"),
        node_local_storage=bool(data["node_local_storage"]),
        local_directory=data.get("local_directory"),
        scheduler_directory=data["scheduler_directory"],
        cpu_cores=cpu.get("cores"),
        cpu_threads=cpu.get("threads"),
        memory=cpu.get("memory"),
        gpu_vendor=gpu.get("vendor"),
        gpu_count=gpu.get("count"),
        gpu_tiles=int(gpu.get("tiles") or 1),
        ssh_hops=tuple(data.get("ssh_hops") or ()),
        worker_env={k: str(v) for k, v in (data.get("worker_env") or {}).items()},
        retired=str(data["retired"]) if data.get("retired") else None,
        batch_directives=tuple(str(d) for d in batch.get("directives") or ()),
        batch_setup=tuple(str(s) for s in batch.get("setup") or ()),
        batch_queue=batch.get("queue"),
        batch_requests=dict(batch.get("requests") or {}),
        batch_cpu_unit=str(batch.get("cpu_unit") or "threads"),
        image=data.get("image", f"dask-hpc-{data['name']}.sif"),  # one name everywhere
        cpu_sockets=int(cpu.get("sockets") or 1),
        cpu_reserved=tuple(int(c) for c in cpu.get("reserved_cores") or ()),
        gpu_order=str(gpu.get("order") or "local-rank"),
        batch_cpu_bind=str(batch.get("cpu_bind") or "launcher"),
        batch_gpu_bind=batch.get("gpu_bind"),
        batch_container=batch.get("container"),
        account_required=_account_required(data["name"], batch),
        default_queue=_default_queue(data["name"], batch),
    )
    site = replace(site, **_container_runtime(data["name"], data))
    if site.batch_system not in BATCH_SYSTEMS:
        raise ValueError(f"site {site.name}: unknown batch_system {site.batch_system!r}")
    if site.batch_cpu_unit not in CPU_UNITS:
        raise ValueError(f"site {site.name}: unknown batch cpu_unit {site.batch_cpu_unit!r}")
    if site.gpu_order not in GPU_ORDERS:
        raise ValueError(f"site {site.name}: unknown gpu order {site.gpu_order!r}")
    if site.batch_cpu_bind not in CPU_BINDS:
        raise ValueError(f"site {site.name}: unknown batch cpu_bind {site.batch_cpu_bind!r}")
    if site.gpu_vendor not in (None, *GPU_VENDORS):
        raise ValueError(f"site {site.name}: unknown gpu vendor {site.gpu_vendor!r}")
    return site


@cache
def all_sites() -> dict[str, Site]:
    """Every site profile shipped in the package, by name."""
    sites = {}
    for entry in sorted(resources.files("dask_hpc").joinpath("sites").iterdir(), key=str):
        if entry.name.endswith(".yaml"):
            site = _from_mapping(yaml.load(entry.read_text(), Loader=_LOADER))
            sites[site.name] = site
    return sites


def site_names() -> list[str]:
    return sorted(all_sites())


def load_site(name: str) -> Site:
    """The profile called ``name``, or a UsageError listing the known ones."""
    try:
        return all_sites()[name]
    except KeyError:
        raise UsageError(
            f"unknown site {name!r}", f"use one of: {', '.join(site_names())}"
        ) from None


def detect_site(env: Mapping[str, str] | None = None, hostname: str | None = None) -> Site:
    """The site this machine belongs to, or ``generic``."""
    env = os.environ if env is None else env
    hostname = socket.gethostname() if hostname is None else hostname
    for site in all_sites().values():
        if site.name != "generic" and site.matches(env, hostname):
            return site
    return all_sites()["generic"]
