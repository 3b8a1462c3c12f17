"""EMULATED launchers that cannot run here, built over real ones (see notes/launchers.md).

Each ``emulated_*`` function returns an argv prefix; append the program:
``emulated_pals(tmp_path, nodes=2, ppn=3) + ["start-cluster", "cpu", "3", "--", ...]``.
The prefix is ``env <batch-job variables> <real launcher> <per-rank shim>``: the batch system's
job-level variables (including ones a launcher detector must ignore, e.g. ``PBS_TASKNUM=1``,
``PBS_NODENUM=0``, ``LSB_JOBINDEX=0``) are set once around the launcher; the shim in
``bin/`` maps the real launcher's per-rank variables to the emulated launcher's.

Limits of emulation: every emulated node is this host (``hostname`` is the same on all ranks).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from .mpi import BIN, mpich, openmpi, write_hostfile

PALS_RANK = BIN / "pals-rank"
JSRUN_RANK = BIN / "jsrun-rank"


def _env_prefix(env: Mapping[str, str]) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in env.items())]


def aurora_hosts(nodes: int) -> list[str]:
    """Aurora-style compute node names."""
    return [f"x4000c0s{i}b0n0" for i in range(nodes)]


def pbs_job_env(
    workdir: Path, hosts: Sequence[str], jobid: str, ncpus: int, queue: str = "debug"
) -> dict[str, str]:
    """The variables PBS Pro puts in a batch job's environment; writes ``PBS_NODEFILE``."""
    nodefile = workdir / f"pbs-nodefile-{jobid.split('.')[0]}"
    nodefile.write_text("".join(f"{h}.hostmgmt.cm.aurora.alcf.anl.gov\n" for h in hosts))
    return {
        "PBS_JOBID": jobid,
        "PBS_JOBNAME": "dask-hpc-test",
        "PBS_NODEFILE": str(nodefile),
        "PBS_O_WORKDIR": str(workdir),
        "PBS_O_HOST": "aurora-uan-0010.hostmgmt.cm.aurora.alcf.anl.gov",
        "PBS_O_QUEUE": queue,
        "PBS_QUEUE": queue,
        "PBS_ENVIRONMENT": "PBS_BATCH",
        "PBS_ACCOUNT": "testproj",
        "PBS_JOBDIR": str(workdir),
        "PBS_MOMPORT": "15003",
        "PBS_TASKNUM": "1",  # must not be read as a rank
        "PBS_NODENUM": "0",  # must not be read as a node index
        "NCPUS": str(ncpus),
        "OMP_NUM_THREADS": str(ncpus),  # PBS Pro sets it from ncpus/ompthreads
    }


def emulated_pals(
    workdir: str | os.PathLike[str],
    nodes: int = 2,
    ppn: int = 3,
    *,
    jobid: str = "4242.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov",
    depth: int = 1,
    ncpus: int = 208,
    extra_env: Mapping[str, str] | None = None,
    hydra_args: Sequence[str] = (),
    cpu_bind: str | None = None,
) -> list[str]:
    """EMULATED HPE PALS ``mpiexec -n N --ppn P`` inside a PBS Pro job (Aurora, Polaris).

    Over ``mpiexec.mpich -launcher fork -hosts``. Each rank gets ``PALS_RANKID``,
    ``PALS_LOCAL_RANKID``, ``PALS_NODEID``, ``PALS_APID``, ``PALS_DEPTH``, ``PALS_SPOOL_DIR``,
    ``PALS_APINFO``, ``PMI_RANK``, ``PMI_SIZE``, ``PMI_LOCAL_RANK``, ``PMI_LOCAL_SIZE``,
    ``PMI_UNIVERSE_SIZE``, ``PMI_JOBID``, ``PMI_CONTROL_PORT``, ``PMI_SHARED_SECRET`` (and
    hydra's ``PMI_FD``); hydra's ``MPI_LOCALRANKID``/``MPI_LOCALNRANKS`` are removed.
    ``hydra_args``: options of the hydra ``mpiexec`` underneath (what it does on a rank's
    failure is hydra's, not PALS's). ``cpu_bind``: PALS's ``--cpu-bind list:A:B``, local rank
    i bound to the i-th list (with taskset).
    """
    wd = Path(workdir)
    hosts = aurora_hosts(nodes)
    env = pbs_job_env(wd, hosts, jobid, ncpus)
    ranks_env, launcher = pals_ranks(
        wd, hosts, nodes * ppn, ppn, depth=depth, hydra_args=hydra_args, cpu_bind=cpu_bind
    )
    env.update(ranks_env)
    env.update(extra_env or {})
    return [*_env_prefix(env), *launcher]


def pals_ranks(
    workdir: Path,
    hosts: Sequence[str],
    n: int,
    ppn: int,
    *,
    depth: int = 1,
    hydra_args: Sequence[str] = (),
    cpu_bind: str | None = None,
) -> tuple[dict[str, str], list[str]]:
    """PALS ``mpiexec -n N --ppn P [--cpu-bind list:...]`` over ``hosts``: the variables the
    per-rank shim reads, and the argv prefix (MPICH hydra, fork launcher, ``hydra_args``, then
    ``bin/pals-rank``)."""
    spool = workdir / "pals-spool"
    spool.mkdir(parents=True, exist_ok=True)
    (spool / "apinfo").write_bytes(b"")
    env = {
        "DASK_HPC_EMU_HOSTS": " ".join(hosts),
        "DASK_HPC_EMU_PPN": str(ppn),
        "DASK_HPC_EMU_APID": "b2c4f1a0-7d3e-4e51-9a8c-0f2d6c1e5a77",
        "DASK_HPC_EMU_DEPTH": str(depth),
        "DASK_HPC_EMU_SPOOL": str(spool),
    }
    if cpu_bind:
        env["DASK_HPC_EMU_CPU_BIND"] = cpu_bind
    return env, [*mpich(n, hosts=hosts, ppn=ppn, extra=hydra_args), str(PALS_RANK)]


def summit_hosts(nodes: int) -> list[str]:
    """Summit-style compute node names."""
    return [f"a01n{i + 1:02d}" for i in range(nodes)]


def lsf_job_env(
    workdir: Path, hosts: Sequence[str], jobid: str, cores_per_node: int
) -> dict[str, str]:
    """The variables LSF puts in a batch job's environment; writes ``LSB_DJOB_HOSTFILE``.

    As on Summit the host file has the launch node once, then each compute node once per core.
    """
    hostfile = workdir / f"lsf-hostfile-{jobid}"
    lines = ["batch1"] + [h for h in hosts for _ in range(cores_per_node)]
    hostfile.write_text("\n".join(lines) + "\n")
    mcpu = " ".join(["batch1 1", *(f"{h} {cores_per_node}" for h in hosts)])
    return {
        "LSB_JOBID": jobid,
        "LSB_JOBNAME": "dask-hpc-test",
        "LSB_QUEUE": "batch",
        "LSB_DJOB_HOSTFILE": str(hostfile),
        "LSB_HOSTS": " ".join(lines),
        "LSB_MCPU_HOSTS": mcpu,
        "LSB_DJOB_NUMPROC": str(len(lines)),
        "LSB_MAX_NUM_PROCESSORS": str(len(lines)),
        "LSB_JOBINDEX": "0",  # array index, must not be read as a rank
        "LS_SUBCWD": str(workdir),
        "LSB_SUB_HOST": "login1",
    }


def emulated_jsrun(
    workdir: str | os.PathLike[str],
    nodes: int = 2,
    ppn: int = 3,
    *,
    gpus_per_task: int = 0,
    jobid: str = "1234567",
    cores_per_node: int = 42,
    mpi: str = "openmpi",
    jsm_local_size: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> list[str]:
    """EMULATED IBM ``jsrun -n nodes*ppn -a1 [-gG]`` inside an LSF job (Summit).

    Over Open MPI with made-up hosts (``mpi="openmpi"``, the default: Spectrum MPI is Open
    MPI) or MPICH fork (``mpi="mpich"``). Each rank gets ``JSM_NAMESPACE_RANK``,
    ``JSM_NAMESPACE_LOCAL_RANK``, ``JSM_NAMESPACE_SIZE`` (``JSM_NAMESPACE_LOCAL_SIZE`` only
    with ``jsm_local_size``: launchers.md lists none), ``OMPI_COMM_WORLD_*``, ``PMIX_RANK``,
    and with ``gpus_per_task=G`` its own ``CUDA_VISIBLE_DEVICES`` (G devices by local rank).
    """
    wd = Path(workdir)
    hosts = summit_hosts(nodes)
    env = lsf_job_env(wd, hosts, jobid, cores_per_node)
    ranks_env, launcher = jsrun_ranks(
        wd, hosts, nodes * ppn, ppn, jobid=jobid, gpus_per_task=gpus_per_task, mpi=mpi,
        jsm_local_size=jsm_local_size,
    )
    env.update(ranks_env)
    env.update(extra_env or {})
    return [*_env_prefix(env), *launcher]


def jsrun_ranks(
    workdir: Path,
    hosts: Sequence[str],
    n: int,
    ppn: int,
    *,
    jobid: str,
    gpus_per_task: int = 0,
    mpi: str = "openmpi",
    jsm_local_size: bool = False,
) -> tuple[dict[str, str], list[str]]:
    """jsrun's ranks over ``hosts``: the variables the per-rank shim reads, and the argv
    prefix (Open MPI or MPICH over made-up hosts, then ``bin/jsrun-rank``)."""
    env = {
        "DASK_HPC_EMU_GPUS_PER_TASK": str(gpus_per_task),
        "DASK_HPC_EMU_JSM_LOCAL_SIZE": "1" if jsm_local_size else "0",
    }
    if mpi == "openmpi":
        hostfile = write_hostfile(hosts, workdir / f"jsrun-hosts-{jobid}", slots=ppn)
        launcher = openmpi(n, ppn=ppn, hostfile=hostfile)
    elif mpi == "mpich":
        launcher = mpich(n, hosts=hosts, ppn=ppn)
    else:
        raise ValueError(f"mpi must be 'openmpi' or 'mpich', not {mpi!r}")
    return env, [*launcher, str(JSRUN_RANK)]


def emulated_cobalt(
    workdir: str | os.PathLike[str],
    nodes: int = 2,
    ppn: int = 3,
    *,
    jobid: str = "10086",
    extra_env: Mapping[str, str] | None = None,
) -> list[str]:
    """EMULATED Cobalt job (ThetaGPU) around a REAL Open MPI
    ``mpirun --hostfile $COBALT_NODEFILE -npernode P`` over made-up hosts.

    Job-level: ``COBALT_JOBID``, ``COBALT_NODEFILE`` (one line per node), ``COBALT_PARTNAME``,
    ``COBALT_JOBSIZE``, ``COBALT_PARTSIZE``, ``COBALT_QUEUE``. Ranks see Open MPI's variables.
    """
    env = cobalt_job_env(Path(workdir), nodes, jobid)
    env.update(extra_env or {})
    return [*_env_prefix(env), *openmpi(nodes * ppn, ppn=ppn, hostfile=env["COBALT_NODEFILE"])]


def cobalt_job_env(workdir: Path, nodes: int, jobid: str = "10086") -> dict[str, str]:
    """The variables a Cobalt job has (ThetaGPU); writes ``COBALT_NODEFILE``."""
    hosts = [f"thetagpu{i + 5:02d}" for i in range(nodes)]
    nodefile = write_hostfile(hosts, workdir / f"cobalt-nodefile-{jobid}")
    return {
        "COBALT_JOBID": jobid,
        "COBALT_NODEFILE": str(nodefile),
        "COBALT_PARTNAME": ",".join(hosts),
        "COBALT_JOBSIZE": str(nodes),
        "COBALT_PARTSIZE": str(nodes),
        "COBALT_QUEUE": "full-node",
    }


def emulated_sbatch_leak(
    ntasks: int = 4, nodes: int = 1, jobid: str = "999", hydra_step: bool = False
) -> list[str]:
    """EMULATED sbatch-script environment (``SLURM_PROCID=0``, ``SLURM_NTASKS``, ...) as an
    ``env`` prefix for a real ``mpiexec`` argv; ``hydra_step`` adds MPICH's ``SLURM_STEP_ID=0``.

    The real thing is ``SlurmCluster.sbatch`` with an ``mpiexec`` in the script.
    """
    nodelist = "node1" if nodes == 1 else f"node[1-{nodes}]"
    env = {
        "SLURM_JOB_ID": jobid,
        "SLURM_JOBID": jobid,
        "SLURM_JOB_NAME": "dask-hpc-test",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NNODES": str(nodes),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": str(max(1, ntasks // nodes)) + (f"(x{nodes})" if nodes > 1 else ""),
        "SLURM_CPUS_ON_NODE": str(max(1, ntasks // nodes)),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_GTIDS": "0",
        "SLURM_SUBMIT_HOST": "login1",
        "SLURMD_NODENAME": "node1",
    }
    if hydra_step:
        env["SLURM_STEP_ID"] = "0"
        env["SLURM_STEPID"] = "0"
    return _env_prefix(env)


def plain_pbs_job_env(
    workdir: Path, hosts: Sequence[str], per_node: int, jobid: str = "7001.pbs01"
) -> dict[str, str]:
    """A plain PBS Pro job's variables (``-l select=N:mpiprocs=P``): ``PBS_NODEFILE`` lists
    each host once per MPI process, as PBS Pro writes it; no PALS, no site names."""
    env = pbs_job_env(workdir, hosts, jobid, per_node)
    nodefile = Path(env["PBS_NODEFILE"])
    nodefile.write_text("".join(f"{h}\n" for h in hosts for _ in range(per_node)))
    env.update(PBS_O_HOST="login1", PBS_O_WORKDIR=str(workdir))
    return env


def plain_lsf_job_env(
    workdir: Path, hosts: Sequence[str], per_node: int, jobid: str = "8001"
) -> dict[str, str]:
    """A plain LSF job's variables (``-n N -R span[ptile=P]``, no IBM CSM): the host file lists
    each execution host once per slot, the first of them runs the script."""
    env = lsf_job_env(workdir, hosts, jobid, per_node)
    lines = [h for h in hosts for _ in range(per_node)]
    Path(env["LSB_DJOB_HOSTFILE"]).write_text("\n".join(lines) + "\n")
    env.update(
        LSB_HOSTS=" ".join(lines),
        LSB_MCPU_HOSTS=" ".join(f"{h} {per_node}" for h in hosts),
        LSB_DJOB_NUMPROC=str(len(lines)),
        LSB_MAX_NUM_PROCESSORS=str(len(lines)),
    )
    return env


def mpi_on_path(directory: Path, flavour: str) -> dict[str, str]:
    """``mpiexec`` and ``mpirun`` in ``directory`` as the REAL Open MPI or MPICH (what a site's
    MPI module puts on PATH), with what running over made-up host names here needs: Open MPI
    through ``fake-rsh``, hydra with its fork launcher. Returns the variables to add."""
    real = {"openmpi": "mpiexec.openmpi", "mpich": "mpiexec.mpich"}[flavour]
    target = shutil.which(real)
    if target is None:
        raise RuntimeError(f"{real} not found: run tests/setup/install.sh")
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("mpiexec", "mpirun"):
        (directory / name).symlink_to(target)
    if flavour == "mpich":  # hydra starts the proxy beside the mpiexec it was called as
        (directory / "hydra_pmi_proxy").symlink_to(Path(target).parent / "hydra_pmi_proxy")
    if flavour == "openmpi":
        return {
            "OMPI_MCA_plm_rsh_agent": str(BIN / "fake-rsh"),
            "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
        }
    return {"HYDRA_LAUNCHER": "fork"}
