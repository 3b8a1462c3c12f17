"""CPUs and memory this process may really use: CPU affinity and cgroup limits respected."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Less memory than this, and a Dask worker (about 100-150 MB once its modules are loaded) is
# over its limit from the start: its Nanny restarts it again and again. A bare number is
# bytes to Dask: "--memory-limit 16" was 16 bytes, and the workers restarted in a loop.
MIN_WORKER_MEMORY = 256 * 2**20


@dataclass(frozen=True)
class NodeResources:
    """What this rank sees of its node."""

    online_cpus: int  # CPUs of the machine
    usable_cpus: int  # CPUs this process may run on (affinity and cgroup quota)
    memory: int  # bytes this process may use (cgroup limit or physical memory)
    cpus: frozenset[int] | None = None  # its affinity (None: CPUs 0 .. usable_cpus - 1)
    allowed: frozenset[int] | None = None  # what its cgroup's cpuset allows (None: all online)

    @property
    def affinity(self) -> frozenset[int]:
        return self.cpus if self.cpus is not None else frozenset(range(self.usable_cpus))

    @property
    def allowed_cpus(self) -> frozenset[int]:
        return self.allowed if self.allowed is not None else frozenset(range(self.online_cpus))


def _cgroup_dirs(proc_cgroup: Path = Path("/proc/self/cgroup")) -> list[Path]:
    """This process's cgroup directories (v2 unified and v1 controllers), innermost first."""
    dirs: list[Path] = []
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return dirs
    for line in lines:
        _, controllers, path = line.split(":", 2)
        bases = (
            [CGROUP_ROOT]
            if not controllers
            else [CGROUP_ROOT / c for c in controllers.split(",")] + [CGROUP_ROOT / controllers]
        )
        for base in bases:
            here = base / path.lstrip("/")
            while base in here.parents or here == base:
                if here.is_dir() and here not in dirs:
                    dirs.append(here)
                here = here.parent
    return dirs


def _read_number(path: Path) -> int | None:
    try:
        text = path.read_text().split()
    except OSError:
        return None
    if not text or text[0] == "max":
        return None
    try:
        return int(text[0])
    except ValueError:
        return None


def cgroup_memory_limit() -> int | None:
    """The tightest memory limit of the cgroups this process is in, or None."""
    limits = []
    for d in _cgroup_dirs():
        for name in ("memory.max", "memory.limit_in_bytes"):
            value = _read_number(d / name)
            if value is not None and value < 2**60:
                limits.append(value)
    return min(limits) if limits else None


def cgroup_cpu_quota() -> float | None:
    """CPUs allowed by a CFS quota (cpu.max or cpu.cfs_quota_us), or None."""
    quotas = []
    for d in _cgroup_dirs():
        try:
            quota, period = (d / "cpu.max").read_text().split()
            if quota != "max":
                quotas.append(int(quota) / int(period))
            continue
        except (OSError, ValueError):
            pass
        quota_us = _read_number(d / "cpu.cfs_quota_us")
        period_us = _read_number(d / "cpu.cfs_period_us")
        if quota_us and quota_us > 0 and period_us:
            quotas.append(quota_us / period_us)
    return min(quotas) if quotas else None


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs in the kernel's list format ("0-3,8,10-11")."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: frozenset[int]) -> str:
    """The kernel's list format of ``cpus`` (ranges joined)."""
    ordered = sorted(cpus)
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def cgroup_cpuset() -> frozenset[int] | None:
    """The CPUs the innermost cpuset of this process's cgroups allows (a batch job's
    allocation under Slurm's task/cgroup or PBS cpusets), or None."""
    for d in _cgroup_dirs():
        for name in ("cpuset.cpus.effective", "cpuset.effective_cpus", "cpuset.cpus"):
            try:
                text = (d / name).read_text()
            except OSError:
                continue
            if text.strip():
                return parse_cpu_list(text)
    return None


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def detect() -> NodeResources:
    """CPUs and memory of this node as this process is allowed to use them."""
    online = os.cpu_count() or 1
    cpus = frozenset(os.sched_getaffinity(0))
    allowed = cgroup_cpuset() or frozenset(range(online))
    memory = physical_memory()
    limit = cgroup_memory_limit()
    if limit is not None:
        memory = min(memory, limit)
    return NodeResources(online, quota_cpus(len(cpus)), memory, cpus, allowed | cpus)


def quota_cpus(cpus: int) -> int:
    """``cpus``, or fewer where a cgroup's CPU quota allows fewer."""
    quota = cgroup_cpu_quota()
    return cpus if quota is None else max(1, min(cpus, math.floor(quota)))


def raise_open_files(needed: int) -> str | None:
    """Raise this process's open-file soft limit to ``needed`` (what its children inherit).

    Returns one line to show when the hard limit is below ``needed``: the soft limit is then
    raised to the hard one, and the cluster goes on (it may still fit).
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    target = needed if hard == resource.RLIM_INFINITY or hard >= needed else hard
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        return (
            f"warning: the open-file hard limit ({hard}, ulimit -Hn) is below the ~{needed} "
            "this rank needs for this cluster's size: expect 'Too many open files'; ask the "
            "site for a higher limit, or start fewer workers per rank"
        )
    return None


def check_worker_memory(value: int, text: str | int, what: str) -> int:
    """``value`` (bytes, read from ``text``), or a UsageError when no worker could run in it."""
    if value < MIN_WORKER_MEMORY:
        from dask.utils import format_bytes

        from ..errors import UsageError

        bare = str(text).strip()
        if "." in bare and bare.replace(".", "", 1).isdigit():  # 1.5: a fraction over 1?
            raise UsageError(
                f"{what} {text!r} is no share of the node's memory (a fraction is at most 1) "
                f"and, as bytes, {format_bytes(value)}",
                f"give a unit, e.g. {bare}GB",
            )
        raise UsageError(
            f"{what} {text!r} is {format_bytes(value)}, too little for a Dask worker (at least "
            f"{format_bytes(MIN_WORKER_MEMORY)})",
            f"give a unit, e.g. {bare if bare.isdigit() else 16}GB (a bare number is bytes)",
        )
    return value


def worker_memory_limit(text: str | None, node_memory: int, share: int) -> int:
    """A worker's memory limit in bytes: ``text`` (``--memory-limit``: a size, or a fraction of
    the node), or the node's memory shared by ``share`` workers."""
    if text is None:
        return node_memory // share
    from dask.utils import parse_bytes

    from ..errors import UsageError

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
    return check_worker_memory(limit, text, "--memory-limit")
