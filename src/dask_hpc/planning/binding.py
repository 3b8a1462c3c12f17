"""The CPUs a rank's processes run on: what the launcher's binding gave, widened or refused.

A rank that starts several workers (one rank per node) needs a CPU per worker at least. Open
MPI binds a lone rank to one core unless told otherwise, and its scheduler, workers and
COMMAND inherit that core: measured, four CPU-bound tasks on 2 workers took 3.0 s instead of
1.5 s, a dataframe notebook 17-18 s instead of 10.1 s. Such a default binding is widened to
what the rank's cgroup allows (the job's allocation: nothing else of the job runs on a node
with one rank), with one line. A binding the user chose, or a Slurm task's allocation (the
rest of a shared node may be other jobs'), is kept when it holds a CPU per worker, and
refused with the launcher's fix when it does not. A node that simply has fewer CPUs than
workers (no binding) is the user's choice and runs oversubscribed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import UsageError
from .launchers import Launcher
from .resources import NodeResources, format_cpu_list


@dataclass(frozen=True)
class CpuChoice:
    """What this rank runs on."""

    cpus: frozenset[int]  # the CPUs its processes will run on
    widen: bool  # set this rank's affinity to ``cpus`` before it starts anything
    keep: bool  # each worker keeps the launcher's binding (dask-cuda must not move it)
    note: str | None = None


def choose_cpus(
    launcher: Launcher,
    env: Mapping[str, str],
    node: NodeResources,
    workers_here: int,
    ranks_on_node: int,
) -> CpuChoice:
    """Decide this rank's CPUs (see the module's docstring); a UsageError if too few."""
    cpus, allowed = node.affinity, node.allowed_cpus
    bound = len(cpus) < node.online_cpus
    if launcher.name == "none" or (ranks_on_node > 1 and workers_here == 1):
        # Local mode (a taskset around it is the user's), or one worker per rank: the
        # launcher shares the node out among its ranks, and each worker keeps its share.
        return CpuChoice(cpus, widen=False, keep=bound and launcher.name != "none")
    chosen = any(env.get(var) for var in launcher.binding_vars)
    if launcher.binds_by_default and not chosen and cpus < allowed:
        note = (
            f"the launcher bound this rank to CPU(s) {format_cpu_list(cpus)} (its default): "
            f"widened to {format_cpu_list(allowed)}, all this job may use here, for its "
            f"{workers_here} worker(s) ({launcher.unbind} does the same)"
        )
        return CpuChoice(allowed, widen=True, keep=False, note=note)
    if bound and len(cpus) < workers_here:
        raise UsageError(
            f"the launcher gave this rank {len(cpus)} CPU(s) ({format_cpu_list(cpus)}) but "
            f"it starts {workers_here} workers",
            f"give it a CPU per worker: {launcher.cpu_fix.format(n=workers_here)}",
        )
    return CpuChoice(cpus, widen=False, keep=bound and workers_here == 1)
