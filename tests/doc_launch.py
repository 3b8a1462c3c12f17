"""``start-cluster`` lines of the documentation, dry-run: planned (``plan.make_plan``, what
``--dry-run`` prints) in the environment the line's launcher gives its first rank, EMULATED from
the launcher's own options (importable as ``doc_launch``): ranks per node, the CPUs it binds a
rank to, the GPUs the allocation holds. A line start-cluster itself would refuse (too few CPUs
for its workers, no GPU) fails here with start-cluster's own one line.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import dask.config

from dask_hpc.cli import parse
from dask_hpc.errors import UsageError
from dask_hpc.planning.plan import make_plan
from dask_hpc.planning.resources import NodeResources
from dask_hpc.planning.sites import load_site

VISIBLE = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES"}


def options(argv: Sequence[str]) -> dict[str, str]:
    """``--name=value``, ``--name value`` and ``-x value`` options before the program."""
    out: dict[str, str] = {}
    items = list(argv)
    while items and items[0].startswith("-"):
        word = items.pop(0)
        if "=" in word:
            key, value = word.split("=", 1)
        elif items and not items[0].startswith("-") and word not in ("--no-kill",):
            key, value = word, items.pop(0)
        else:
            key, value = word, ""
        out[key] = value
    return out


def program(argv: Sequence[str]) -> list[str]:
    """The start-cluster command inside a launcher line (past ``apptainer exec ... IMAGE``)."""
    at = list(argv).index("start-cluster")
    return list(argv)[at + 1 :]


def _first(opts: Mapping[str, str], *names: str, default: str = "") -> str:
    return next((opts[n] for n in names if opts.get(n)), default)


def _gpus(opts: Mapping[str, str]) -> int:
    gres = _first(opts, "--gres")
    match = re.search(r"gpu(?::\w+)?:(\d+)", gres)
    return int(match.group(1)) if match else int(_first(opts, "--gpus-per-node", "-g",
                                                         "--gpu_per_rs", default="0"))


def rank_environment(launcher: str, argv: Sequence[str], allocation: Sequence[str],
                     site: str) -> tuple[dict[str, str], int, str]:
    """(the first rank's variables, the CPUs it is bound to, the launcher's name)."""
    opts = options(argv[1:])
    held = options(allocation[1:]) if allocation else {}
    vendor = load_site(site).gpu_vendor
    gpus = _gpus(opts) or _gpus(held)
    env: dict[str, str] = {}
    if launcher == "srun":
        nodes = int(_first(opts, "-N", "--nodes", default=_first(held, "-N", "--nodes",
                                                                    default="1")))
        per = int(_first(opts, "--ntasks-per-node", default="1"))
        cpus = int(_first(opts, "-c", "--cpus-per-task", default="1"))  # srun's own, else 1
        env = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
               "SLURM_STEP_NUM_TASKS": str(nodes * per),
               "SLURM_STEP_TASKS_PER_NODE": f"{per}(x{nodes})" if nodes > 1 else str(per),
               "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}
        name = "slurm"
    elif launcher == "mpiexec" and "--ppn" in opts:  # HPE PALS
        n, per = int(opts["-n"]), int(opts["--ppn"])
        bind = opts.get("--cpu-bind", "")
        cpus = int(opts.get("--depth") or 0) if bind == "depth" else 0
        if bind.startswith("list:"):  # the first rank's list: 1-17 or 1-8,105-112
            first = bind[len("list:"):].split(":")[0]
            cpus = sum(int(b) - int(a) + 1 for a, _, b in
                       (part.partition("-") if "-" in part else (part, "-", part)
                        for part in first.split(",")))
        env = {"PALS_RANKID": "0", "PALS_LOCAL_RANKID": "0", "PALS_NODEID": "0",
               "PMI_SIZE": str(n), "PMI_LOCAL_SIZE": str(per), "PBS_JOBID": "7.pbs01",
               "PALS_APID": "a1"}
        name = "pals"
    elif launcher in ("mpiexec", "mpirun"):  # Open MPI
        n = int(_first(opts, "-n", "-np"))
        ppr = re.search(r"ppr:(\d+):node(?::pe=(\d+))?", opts.get("--map-by", ""))
        per = int(ppr.group(1)) if ppr else int(_first(opts, "--npernode", "-npernode",
                                                        default=str(n)))
        cpus = int(ppr.group(2)) if ppr and ppr.group(2) else 1  # a lone core, then widened
        env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
               "OMPI_COMM_WORLD_SIZE": str(n), "OMPI_COMM_WORLD_LOCAL_SIZE": str(per),
               "OMPI_MCA_ess_base_jobid": "42", "PBS_JOBID": "7.pbs01"}
        if "--map-by" in opts:
            env["OMPI_MCA_rmaps_base_mapping_policy"] = opts["--map-by"]
        name = "openmpi"
    elif launcher == "flux":  # flux run: a task's cores and GPUs, as Flux's job shell sets them
        opts = options(argv[2:])
        nodes = int(_first(opts, "-N", "--nodes", default="1"))
        per = int(_first(opts, "--tasks-per-node", default="0"))
        n = int(_first(opts, "-n", "--ntasks", default=str(nodes * (per or 1))))
        per = per or n // nodes
        per_task = {o: f"{o}=per-task" in argv for o in ("cpu-affinity", "gpu-affinity")}
        cores = int(_first(opts, "-c", "--cores-per-task", default="1"))
        whole = "--tasks-per-node" in opts or "--exclusive" in opts  # the node's every core
        cpus = 0 if whole else cores * (1 if per_task["cpu-affinity"] else per)
        env = {"FLUX_TASK_RANK": "0", "FLUX_TASK_LOCAL_ID": "0", "FLUX_JOB_SIZE": str(n),
               "FLUX_JOB_NNODES": str(nodes), "FLUX_JOB_ID": "f2X3", "FLUX_JOB_ID_PATH": "/f2X3",
               "FLUX_URI": "local:///run/flux/local"}
        name = "flux"
        task_gpus = int(_first(opts, "-g", "--gpus-per-task", default="0"))
        # Flux sets CUDA_VISIBLE_DEVICES whatever the vendor: the task's own GPUs (per-task),
        # else its node's tasks' together; -1 where the job has none.
        shown = task_gpus if per_task["gpu-affinity"] else task_gpus * per
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(shown))) if shown else "-1"
        gpus = 0
    elif launcher == "jsrun":
        n = int(_first(opts, "--nrs", "-n"))
        per = int(_first(opts, "--rs_per_host", "-r", default="1"))
        cpus = int(_first(opts, "--cpu_per_rs", "-c", default="1"))
        env = {"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_LOCAL_RANK": "0",
               "JSM_NAMESPACE_SIZE": str(n), "OMPI_COMM_WORLD_LOCAL_SIZE": str(per),
               "LSB_JOBID": "1234"}
        name = "jsrun"
        if gpus:  # a resource set's GPU, narrowed by jsrun
            env[VISIBLE.get(vendor or "", "CUDA_VISIBLE_DEVICES")] = "0"
            gpus = 0
    else:
        raise AssertionError(f"no emulation of launcher {launcher!r}")
    if gpus and opts.get("--gpus-per-task"):  # srun's own GPU for each task (Frontier)
        gpus = int(opts["--gpus-per-task"])
    if gpus:  # the allocation's GPUs, as Slurm hands them to its tasks
        env[VISIBLE.get(vendor or "nvidia", "CUDA_VISIBLE_DEVICES")] = ",".join(
            map(str, range(gpus))
        )
    return env, cpus, name


def nvidia_driver(root: Path, gpus: int) -> Path:
    """What NVIDIA's driver shows of ``gpus`` GPUs (``/proc/driver/nvidia/gpus``), under root:
    a node with no site profile finds its GPUs' vendor there (EMULATED)."""
    for i in range(gpus):
        (root / f"proc/driver/nvidia/gpus/0000:{i + 7:02x}:00.0").mkdir(parents=True)
    return root


def plan_line(argv: Sequence[str], allocation: Sequence[str], site: str | None) -> str:
    """Plan the line's start-cluster as its launcher's first rank would; the plan's summary,
    or an AssertionError with start-cluster's own line."""
    sc = program(argv)
    try:
        settings = parse(sc)
    except UsageError as error:
        raise AssertionError(f"start-cluster refuses its arguments: {error}") from None
    name = settings.site or site or "generic"
    threads = load_site(name).cpu_threads or 64
    if argv[0] == "start-cluster":
        env, bound, launcher = {}, 0, "none"
    else:
        env, bound, launcher = rank_environment(argv[0], argv, allocation, name)
    cpus = frozenset(range(bound or threads))
    node = NodeResources(threads, len(cpus), 2**40, cpus, frozenset(range(threads)))
    with tempfile.TemporaryDirectory() as tmp, dask.config.set(
        {"hpc.scheduler-directory": tmp, "hpc.site": name}
    ):
        # the site's node-local directory is not on this machine
        settings = dataclasses.replace(settings, local_directory=tmp)
        visible = env.get("CUDA_VISIBLE_DEVICES", "")
        root = nvidia_driver(Path(tmp) / "root", len(visible.split(",")) if visible else 0)
        try:
            plan = make_plan(settings, env=env, node=node, gpu_root=root)
        except UsageError as error:
            raise AssertionError(f"start-cluster refuses it ({launcher}): {error}") from None
    workers = [p for p in plan.processes if p.role == "worker"]
    return f"planned under {launcher} ({name}): {len(workers)} worker(s) on this rank"
