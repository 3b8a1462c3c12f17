"""What a job asks its batch system for on each node: ranks, CPUs, GPUs and memory.

Worked out from the job's shape (workers per node, cpu or gpu), what its workers are given
(``--nthreads``, ``--memory-limit``, or the settings that set them), and the node: the site
profile's counts, else ``hpc.node-gpus``/``hpc.node-cpus`` (the Ansible role writes them on
DeepOps), else the batch system itself (Slurm: ``sinfo``). A GPU count is never guessed: where
none of these says it, a UsageError names the option that does. The directives' formats are
data (``systems.yaml``'s ``requests``, a site profile's ``batch.requests`` over them).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dask.utils import parse_bytes

from .. import config
from ..errors import UsageError
from ..planning.resources import check_worker_memory
from ..planning.sites import Site

REQUESTS = ("nodes", "ranks", "cpus", "gpus", "memory")
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class NodeFacts:
    """What one node holds: CPUs (in the batch system's unit), physical cores, GPUs."""

    cpus: int | None
    cores: int | None
    gpus: int | None
    source: str  # where the counts came from, for messages


@dataclass(frozen=True)
class Shape:
    """One node of a job: one rank per worker, and what each rank and the node get."""

    per_node: int
    cpus_per_rank: int  # what the batch system counts (Slurm -c, PALS --depth)
    cores_per_rank: int  # physical cores (Open MPI pe=, jsrun --cpu_per_rs, LSF affinity)
    gpus_per_node: int
    memory_per_rank: int | None  # bytes; None: not asked (the batch system's default)
    worker_args: tuple[str, ...]  # start-cluster options the settings add (--nthreads N ...)

    def fields(self, nodes: int, gpu: bool) -> dict[str, int]:
        """The fields of the directives' and the launchers' formats."""
        memory = self.memory_per_rank or 0
        return {
            "nodes": nodes,
            "per_node": self.per_node,
            "ranks": nodes * self.per_node,
            "cpus_per_rank": self.cpus_per_rank,
            "cores_per_rank": self.cores_per_rank,
            "cpus_per_node": self.cpus_per_rank * self.per_node,
            "gpus_per_node": self.gpus_per_node,
            "gpus_per_rank": 1 if gpu else 0,
            "memory_per_rank_mb": math.ceil(memory / 2**20),
            "memory_per_node_mb": math.ceil(memory * self.per_node / 2**20),
        }


def option_value(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in ``args`` (the last one given)."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def memory_bytes(text: str | int | None, what: str) -> int | None:
    """A memory size in bytes (``16GB``, ``512MiB``, a number); None for None; a fraction or
    ``auto`` (a share of whatever the node has) is not a size to ask for: None."""
    if text is None:
        return None
    if isinstance(text, int):
        return check_worker_memory(text, text, what)
    if text == "auto" or re.fullmatch(r"0?\.\d+|1(\.0*)?", text.strip()):
        return None
    try:
        value = parse_bytes(text)
    except (ValueError, TypeError):
        value = 0
    if value <= 0:
        raise UsageError(f"{what} {text!r} is not a memory size", "write it like 16GB or 512MiB")
    return check_worker_memory(value, text, what)


def worker_settings(
    args: Sequence[str], cpus: int | None, memory: str | int | None
) -> tuple[int | None, int | None, list[str]]:
    """(CPUs, memory in bytes, options to add) per worker: the settings and the workers'
    own ``--nthreads``/``--memory-limit`` agree, and each implies the other."""
    nthreads = option_value(args, "--nthreads")
    if nthreads is not None and (not nthreads.isdigit() or int(nthreads) < 1):
        raise UsageError(f"--nthreads {nthreads!r} is not a positive integer")
    added: list[str] = []
    if cpus is not None and nthreads is not None and int(nthreads) != cpus:
        raise UsageError(
            f"{cpus} CPUs per worker, but the workers' --nthreads says {nthreads}",
            "give one of them (cpus_per_worker, or jobqueue's cores)",
        )
    if cpus is None and nthreads is not None:
        cpus = int(nthreads)
    elif cpus is not None and nthreads is None:
        added += ["--nthreads", str(cpus)]
    limit = option_value(args, "--memory-limit")
    wanted = memory_bytes(memory, "memory per worker")
    given = memory_bytes(limit, "--memory-limit")
    if wanted is not None and limit is not None and given != wanted:
        raise UsageError(
            f"{memory} of memory per worker, but the workers' --memory-limit says {limit}",
            "give one of them (memory_per_worker, or jobqueue's memory)",
        )
    if wanted is not None and limit is None:
        added += ["--memory-limit", str(memory)]
    return cpus, wanted if wanted is not None else given, added


def query_nodes(
    row: Mapping[str, Any], queue: str | None, run: Runner | None = None
) -> list[tuple[int, int]]:
    """(CPUs, GPUs) of each kind of node the job may land on, as the batch system says
    (its queue's nodes, else its default queue's); a UsageError when it cannot say."""
    spec = row.get("node_query")
    if not spec:
        raise UsageError("this batch system cannot be asked for its nodes' GPUs and CPUs")
    argv = list(spec["argv"]) + ([spec["queue"].format(queue)] if queue else [])
    if run is None and shutil.which(argv[0]) is None:
        raise UsageError(f"{argv[0]} not found (asked for the nodes' GPUs and CPUs)")
    try:
        done = (run or _run)(argv)
    except (OSError, subprocess.SubprocessError) as error:
        raise UsageError(f"{argv[0]} failed: {error}") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise UsageError(f"{argv[0]} failed: {said[-1] if said else done.returncode}")
    rows = []
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        partition, cpus, gres = parts
        if not queue and not partition.endswith("*"):
            continue  # another than the default partition
        gpus = sum(int(n) for n in re.findall(spec["gpus"], gres))
        rows.append((int(cpus), gpus))
    return rows


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30)


def node_facts(
    site: Site,
    row: Mapping[str, Any],
    queue: str | None,
    gpus_asked: int | None,
    run: Runner | None = None,
) -> NodeFacts:
    """A node of ``site`` for a gpu job: the profile's, the configuration's, else the batch
    system's counts; a UsageError where none says (never a guess)."""
    threads = site.cpu_cores if site.batch_cpu_unit == "cores" else site.cpu_threads
    cpus = config.get("node-cpus") or threads
    gpus = config.get("node-gpus") or site.gpu_count
    if cpus and gpus:
        source = "site profile" if (cpus, gpus) == (threads, site.gpu_count) else "hpc.node-*"
        return NodeFacts(int(cpus), site.cpu_cores or int(cpus), int(gpus), source)
    fix = (
        "give --gpus-per-node and --cpus-per-worker (gpus_per_node=, cpus_per_worker=), "
        "or set hpc.node-gpus and hpc.node-cpus"
    )
    try:
        rows = [r for r in query_nodes(row, queue, run) if r[1] > 0]
    except UsageError as error:
        raise UsageError(
            f"how many GPUs and CPUs a {site.name} node has is not known ({error.problem})", fix
        ) from None
    where = f"partition {queue}" if queue else "the default partition"
    if gpus_asked:
        rows = [r for r in rows if r[1] >= gpus_asked]
    if not rows:
        wanted = f"{gpus_asked} GPUs" if gpus_asked else "GPUs"
        raise UsageError(f"no node of {where} has {wanted} (sinfo)", "ask for another --queue")
    counts = sorted({g for _, g in rows})
    if len(counts) > 1 and not gpus_asked:
        shown = " or ".join(map(str, counts))
        raise UsageError(
            f"the nodes of {where} have {shown} GPUs", "say how many a job uses: --gpus-per-node"
        )
    least_cpus = min(c for c, _ in rows)
    source = str(row["node_query"]["argv"][0])  # sinfo
    return NodeFacts(int(cpus or least_cpus), None, int(gpus or counts[0]), source)


def default_workers_per_node(
    site: Site, row: Mapping[str, Any], kind: str, queue: str | None, gpus: int | None
) -> int:
    """Workers per node when none is asked: one per GPU of a node (never a guessed count),
    else 1."""
    if kind != "gpu":
        return 1
    return gpus or node_facts(site, row, queue, None).gpus or 1


def job_shape(
    site: Site,
    row: Mapping[str, Any],
    *,
    kind: str,
    workers_per_node: int | None,
    gpus_per_node: int | None,
    cpus_per_worker: int | None,
    memory_per_worker: str | int | None,
    worker_args: Sequence[str],
    queue: str | None,
    run: Runner | None = None,
) -> Shape:
    """One node of the job; bad or missing input is a UsageError."""
    for what, value in (("gpus_per_node", gpus_per_node), ("cpus_per_worker", cpus_per_worker)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise UsageError(f"{what} must be a whole number of at least 1, not {value!r}")
    cpus, memory, added = worker_settings(worker_args, cpus_per_worker, memory_per_worker)
    gpu = kind == "gpu"
    facts = None  # the node's counts: needed unless the workers per node and CPUs are given
    if gpu and ((workers_per_node or gpus_per_node) is None or cpus is None):
        facts = node_facts(site, row, queue, gpus_per_node, run)
    asked = workers_per_node or (gpus_per_node if gpu else None)  # one worker per GPU asked
    per_node = asked or (facts.gpus if facts else None) or 1
    if per_node < 1:
        raise UsageError(f"--workers-per-node must be at least 1, not {per_node}")
    known = facts.gpus if facts else (config.get("node-gpus") or site.gpu_count)
    gpus = (gpus_per_node or _gpus_for(per_node, known, site.gpu_tiles)) if gpu else 0
    if facts and facts.gpus and gpus > facts.gpus:
        raise UsageError(
            f"{gpus} GPUs per node asked, but a {site.name} node has {facts.gpus} ({facts.source})",
            "ask for fewer workers per node",
        )
    if cpus is not None:
        cpus_per_rank = cores_per_rank = cpus
        check_node_cpus(site, facts, per_node, cpus)
    else:
        share = gpus / facts.gpus if facts and facts.gpus else 1.0
        node_cpus = facts.cpus if facts else _site_cpus(site)
        node_cores = (facts.cores if facts else site.cpu_cores) or node_cpus
        cpus_per_rank = max(1, int((node_cpus or per_node) * share) // per_node)
        cores_per_rank = max(1, int((node_cores or per_node) * share) // per_node)
    return Shape(per_node, cpus_per_rank, cores_per_rank, gpus, memory, tuple(added))


def usable_cpus(site: Site, facts: NodeFacts | None) -> tuple[int, str] | None:
    """(CPUs of a node a job may ask for, in the batch system's unit, the site's own cores
    left out; how that is counted), or None where nothing says."""
    if facts is not None and facts.source != "site profile":
        return (facts.cpus, facts.source) if facts.cpus else None
    configured = config.get("node-cpus")
    if configured:
        return int(configured), "hpc.node-cpus"
    cores, threads = site.cpu_cores, site.cpu_threads
    if not cores:
        return None
    per_core = (threads // cores) if threads and site.batch_cpu_unit != "cores" else 1
    usable = (cores - len(site.cpu_reserved)) * per_core
    unit = f"{usable // per_core} cores" + (f" x {per_core} threads" if per_core > 1 else "")
    kept = f", {len(site.cpu_reserved)} kept for the system" if site.cpu_reserved else ""
    return usable, f"{unit}{kept}; site profile"


def check_node_cpus(site: Site, facts: NodeFacts | None, per_node: int, cpus: int) -> None:
    """``per_node`` workers of ``cpus`` CPUs each fit a node, or a UsageError naming the most
    each may ask (PALS's --depth=64 x 4 ranks on a 32-core Polaris node starts nothing)."""
    known = usable_cpus(site, facts)
    if known is None:
        return
    usable, how = known
    if per_node * cpus <= usable:
        return
    most = usable // per_node
    fix = (
        f"ask at most {most} per worker (--cpus-per-worker {most}, HPCCluster: "
        "cpus_per_worker=), or start fewer workers per node"
        if most
        else f"start at most {usable} workers per node (--workers-per-node)"
    )
    raise UsageError(
        f"{per_node} worker(s) per node x {cpus} CPUs each is {per_node * cpus} CPUs, but a "
        f"{site.name} node has {usable} for jobs ({how})",
        fix,
    )


def _gpus_for(workers: int, node_gpus: int | None, tiles: int) -> int:
    """GPUs ``workers`` gpu workers use: one each, or one per ``tiles`` workers where there
    are more workers than GPUs (Aurora: 12 workers, one per tile, on 6 GPUs)."""
    if node_gpus and workers > node_gpus:
        return math.ceil(workers / tiles)
    return workers


def _site_cpus(site: Site) -> int | None:
    """The node's CPUs as its batch system counts them (config over the profile)."""
    profile = site.cpu_cores if site.batch_cpu_unit == "cores" else site.cpu_threads
    return config.get("node-cpus") or profile


def directives(
    row: Mapping[str, Any], site: Site, shape: Shape, nodes: int, gpu: bool
) -> list[str]:
    """The header lines asking for the job's nodes and what each holds (its directive
    format applied)."""
    formats = {**row["requests"], **site.batch_requests}
    fields = shape.fields(nodes, gpu)
    wanted = {
        "nodes": True,
        "ranks": True,
        "cpus": True,
        "gpus": shape.gpus_per_node > 0,
        "memory": shape.memory_per_rank is not None,
    }
    parts = [formats[k].format(**fields) for k in REQUESTS if formats.get(k) and wanted[k]]
    joiner = row.get("requests_join")
    if joiner and parts:
        parts = [joiner.join(parts)]
    return [row["directive"].format(p) for p in parts]
