"""Which launcher started this process, and where this process sits in the launch.

Launchers are data: each row names the environment variables that give the global rank,
the local rank, the world size and the local size. Detection checks the MPI-style launchers
before Flux and Slurm, because an ``mpiexec`` inside an ``sbatch`` script hands
``SLURM_PROCID=0`` to every rank, and one inside a Flux job of one task (``flux run -n1
mpiexec ...``) ``FLUX_TASK_RANK=0`` (see the launchers notes; a ``flux batch`` script has no
task variables, measured); and Flux before Slurm, because Flux started by ``srun`` hands its
jobs the ``SLURM_PROCID`` of its first broker. A Flux task of a job of several tasks is Flux's
whatever else it inherited (Flux started by PALS's ``mpiexec`` hands them ``PALS_RANKID=0``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import UsageError
from . import pmi


@dataclass(frozen=True)
class Launcher:
    """How one launcher describes a rank in the environment."""

    name: str
    description: str
    marker: str  # set for every rank of this launcher, and only by it (or its wrappers)
    rank: tuple[str, ...]
    local_rank: tuple[str, ...]
    size: tuple[str, ...]
    local_size: tuple[str, ...]
    node: tuple[str, ...] = ()
    launch_ids: tuple[str, ...] = ()  # variables that together identify this launch
    # CPU binding (see binding.py): does it bind a rank to part of its node unless told not
    # to, which variables say the user chose the binding, and how to give a rank {n} CPUs.
    binds_by_default: bool = False
    binding_vars: tuple[str, ...] = ()
    unbind: str = ""  # the option that turns its default binding off
    cpu_fix: str = ""


# Order matters: the first launcher whose marker is set wins.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher(
        "jsrun",
        "IBM jsrun (Summit, LSF)",
        "JSM_NAMESPACE_RANK",
        rank=("JSM_NAMESPACE_RANK",),
        local_rank=("JSM_NAMESPACE_LOCAL_RANK",),
        size=("JSM_NAMESPACE_SIZE",),
        local_size=("JSM_NAMESPACE_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        launch_ids=("LSB_JOBID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"),
        cpu_fix="give its resource set {n} CPUs: jsrun --cpu_per_rs {n} --bind rs",
    ),
    Launcher(
        "pals",
        "HPE PALS mpiexec (Aurora, Polaris, PBS Pro)",
        "PALS_RANKID",
        rank=("PALS_RANKID",),
        local_rank=("PALS_LOCAL_RANKID", "PMI_LOCAL_RANK"),
        size=("PMI_SIZE",),
        local_size=("PMI_LOCAL_SIZE",),
        node=("PALS_NODEID",),
        launch_ids=("PBS_JOBID", "PALS_APID"),
        cpu_fix="mpiexec --cpu-bind none, or --depth={n} --cpu-bind depth",
    ),
    Launcher(
        "openmpi",
        "Open MPI mpirun/mpiexec (also Cobalt's mpirun)",
        "OMPI_COMM_WORLD_RANK",
        rank=("OMPI_COMM_WORLD_RANK",),
        local_rank=("OMPI_COMM_WORLD_LOCAL_RANK",),
        size=("OMPI_COMM_WORLD_SIZE",),
        local_size=("OMPI_COMM_WORLD_LOCAL_SIZE",),
        launch_ids=("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"),
        # mpirun binds a lone rank to one core, more ranks to a socket, unless told otherwise
        # (measured: mpiexec -n 1 -> CPU 0 of 2; --bind-to/--map-by set these variables).
        binds_by_default=True,
        binding_vars=("OMPI_MCA_hwloc_base_binding_policy", "OMPI_MCA_rmaps_base_mapping_policy"),
        unbind="mpiexec --bind-to none",
        cpu_fix="mpiexec --bind-to none, or --map-by ppr:1:node:pe={n}",
    ),
    Launcher(
        "mpich",
        "MPICH hydra mpiexec",
        "PMI_RANK",
        rank=("PMI_RANK",),
        local_rank=("MPI_LOCALRANKID",),
        size=("PMI_SIZE",),
        local_size=("MPI_LOCALNRANKS",),
        cpu_fix="mpiexec without -bind-to, or -bind-to core:{n}",
    ),
    Launcher(
        "flux",
        "Flux flux run (El Capitan, Tuolumne; Flux inside Slurm or PBS)",
        "FLUX_TASK_RANK",
        rank=("FLUX_TASK_RANK",),
        local_rank=("FLUX_TASK_LOCAL_ID",),
        size=("FLUX_JOB_SIZE",),
        local_size=(),  # from Flux's PMI (flux.taskmap), see flux_placement
        # The job's place in the hierarchy of Flux instances: ids repeat across batch jobs.
        launch_ids=("FLUX_JOB_ID_PATH",),
        # A task's CPUs are its allocation (cpu-affinity=on, the default: the cores Flux gave
        # its node's tasks), as under Slurm: never widened, asked for.
        cpu_fix="flux run --cores-per-task={n}, or -N NODES --tasks-per-node=1 (whole nodes)",
    ),
    Launcher(
        "slurm",
        "Slurm srun",
        "SLURM_PROCID",
        rank=("SLURM_PROCID",),
        local_rank=("SLURM_LOCALID",),
        size=("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
        local_size=(),
        node=("SLURM_NODEID",),
        launch_ids=("SLURM_JOB_ID", "SLURM_STEP_ID"),
        # A task's CPUs are its allocation (other jobs may hold the rest of a shared node):
        # never widened, asked for (measured with task/affinity: srun -n1 -> 1 CPU, -c2 -> 2).
        cpu_fix="srun --cpus-per-task={n} (and --cpu-bind=none if you gave --cpu-bind)",
    ),
)
NONE = Launcher("none", "no launcher: one process on this machine", "", (), (), (), ())
# Flux: a task's own job, else (an mpiexec in a flux batch script) the batch job around it.
BATCH_JOB_IDS = (
    "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "COBALT_JOBID", "FLUX_JOB_ID", "FLUX_ENCLOSING_ID"
)


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the launch."""

    launcher: str
    rank: int
    local_rank: int
    size: int
    local_size: int
    launch_id: str
    job_id: str | None
    node: int | None = None  # the launcher's index of this rank's node, where it says (Flux)

    @property
    def is_first(self) -> bool:
        return self.rank == 0


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if env.get(name, "") != "":
            return env[name]
    return None


def _int(env: Mapping[str, str], names: tuple[str, ...], launcher: Launcher, what: str) -> int:
    raw = _first(env, names)
    if raw is None or not raw.isdigit():
        shown = "/".join(names) or "(none)"
        raise UsageError(
            f"launcher {launcher.name}: {what} variable {shown} is missing or not a number",
            "run start-cluster under that launcher, or pick another with --launcher",
        )
    return int(raw)


def slurm_local_size(env: Mapping[str, str]) -> int | None:
    """Tasks of this step on this node, from SLURM_STEP_TASKS_PER_NODE ("4", "2(x3)", "4,1")."""
    gtids = env.get("SLURM_GTIDS")
    if gtids:
        return len(gtids.split(","))
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    node = env.get("SLURM_NODEID")
    if not spec or node is None or not node.isdigit():
        return None
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not match:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    index = int(node)
    return counts[index] if index < len(counts) else None


def flux_placement(env: Mapping[str, str], taskmap: str | None) -> tuple[int | None, int | None]:
    """(node, tasks of the job on it) of this Flux task: from Flux's task map (RFC 34,
    ``flux.taskmap`` from its PMI: ``{"version":1,"map":[[node,nodes,per_node,repeat],...]}``,
    blocks of tasks in rank order), else (None, the job's size over its nodes) when the tasks
    divide evenly among them; None where neither says."""
    rank = env.get("FLUX_TASK_RANK", "")
    if taskmap and rank.isdigit():
        counts: dict[int, int] = {}
        mine, task = None, 0
        try:
            for first, nodes, per_node, repeat in json.loads(taskmap)["map"]:
                for node in [n for _ in range(repeat) for n in range(first, first + nodes)]:
                    counts[node] = counts.get(node, 0) + per_node
                    if task <= int(rank) < task + per_node:
                        mine = node
                    task += per_node
        except (ValueError, KeyError, TypeError):
            mine = None
        if mine is not None:
            return mine, counts[mine]
    size, nodes = env.get("FLUX_JOB_SIZE", ""), env.get("FLUX_JOB_NNODES", "")
    if size.isdigit() and nodes.isdigit() and int(nodes) and int(size) % int(nodes) == 0:
        return None, int(size) // int(nodes)
    return None, None


def _flux_task_of_many(env: Mapping[str, str]) -> bool:
    """A task of a Flux job of several tasks: Flux launched it, whatever it inherited."""
    size = env.get("FLUX_JOB_SIZE", "")
    return env.get("FLUX_TASK_RANK", "") != "" and size.isdigit() and int(size) > 1


def find_launcher(env: Mapping[str, str], override: str | None = None) -> Launcher:
    """The launcher named by ``override``, else the first whose marker is in ``env``."""
    table = {launcher.name: launcher for launcher in (*LAUNCHERS, NONE)}
    if override:
        if override not in table:
            raise UsageError(f"unknown launcher {override!r}", f"use one of: {', '.join(table)}")
        return table[override]
    if _flux_task_of_many(env):
        return table["flux"]
    for launcher in LAUNCHERS:
        # A marker alone is not enough: srun --mpi=cray_shasta sets PALS_RANKID without a
        # local rank, srun --mpi=pmi2 sets PMI_RANK without hydra's MPI_LOCALRANKID.
        if env.get(launcher.marker, "") != "" and (
            not launcher.local_rank or _first(env, launcher.local_rank) is not None
        ):
            return launcher
    return NONE


def by_name(name: str) -> Launcher:
    """The launcher called ``name`` (as in ``RankInfo.launcher``)."""
    return next(launcher for launcher in (*LAUNCHERS, NONE) if launcher.name == name)


def batch_job_id(env: Mapping[str, str]) -> str | None:
    return _first(env, BATCH_JOB_IDS)


def _launch_id(launcher: Launcher, env: Mapping[str, str], pid: int, host: str) -> str:
    if launcher is NONE:
        return f"local-{host}-{pid}"
    parts = [env[name].strip("/") for name in launcher.launch_ids if env.get(name)]
    if launcher.name == "mpich":
        kvs = pmi.kvsname(env)
        if kvs:
            parts.append(kvs)
    job = batch_job_id(env)
    if job and not any(job in part.split("/") for part in parts):  # Flux: /ƒbatch/ƒjob
        parts.insert(0, job)
    if not parts:
        raise UsageError(
            f"launcher {launcher.name}: nothing in the environment identifies this launch",
            "pass --scheduler-file with a path unique to this run",
        )
    # Flux writes its job ids with a leading "ƒ" (F58): as "f", as with FLUX_F58_FORCE_ASCII.
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(parts).replace("ƒ", "f"))[:120]


def detect(
    env: Mapping[str, str], override: str | None = None, *, pid: int = 0, host: str = "localhost"
) -> RankInfo:
    """Where this process sits: launcher, rank, local rank, sizes and a launch identity."""
    launcher = find_launcher(env, override)
    if launcher is NONE:
        return RankInfo("none", 0, 0, 1, 1, _launch_id(launcher, env, pid, host), None)
    rank = _int(env, launcher.rank, launcher, "rank")
    local_rank = _int(env, launcher.local_rank, launcher, "local rank")
    size = _int(env, launcher.size, launcher, "world size")
    node: int | None = None
    if launcher.name == "slurm":
        local_size = slurm_local_size(env)
        if local_size is None:
            raise UsageError(
                "launcher slurm: cannot tell how many tasks run on this node "
                "(SLURM_STEP_TASKS_PER_NODE missing)",
                "start start-cluster with srun inside an allocation",
            )
    elif launcher.name == "flux":
        taskmap = (pmi.query(env, ["flux.taskmap"]) or {}).get("flux.taskmap")
        node, local_size = flux_placement(env, taskmap)
        if local_size is None:
            raise UsageError(
                "launcher flux: cannot tell how many tasks run on this node "
                "(no flux.taskmap from Flux's PMI, and the tasks do not divide evenly)",
                "run start-cluster with flux run and its default PMI (-o pmi=simple), or "
                "give every node as many tasks (--tasks-per-node)",
            )
    elif launcher.name == "jsrun" and _first(env, launcher.local_size) is None:
        local_size = 1  # jsrun without Spectrum MPI: one task per resource set
    else:
        local_size = _int(env, launcher.local_size, launcher, "local size")
    if not (0 <= rank < size and 0 <= local_rank < local_size <= size):
        raise UsageError(
            f"launcher {launcher.name}: inconsistent rank {rank}/{size}, "
            f"local rank {local_rank}/{local_size}",
            "check the launcher's environment, or pick another with --launcher",
        )
    launch_id = _launch_id(launcher, env, pid, host)
    return RankInfo(
        launcher.name, rank, local_rank, size, local_size, launch_id, batch_job_id(env), node
    )
