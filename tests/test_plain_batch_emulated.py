"""A plain PBS Pro or LSF cluster's job script runs under the MPI the site has: the script tells
Open MPI, MPICH and HPE PALS apart by the job's own ``mpiexec`` and runs that one's launch line.

The scripts are what ``invoke job --site generic --batch-system pbs|lsf`` writes, run with bash
as the batch system would, in the job environment of PBS Pro (``PBS_NODEFILE``, one line per
MPI process) or LSF (``LSB_DJOB_HOSTFILE``, one line per slot) on two made-up nodes: EMULATED,
as PBS and LSF cannot run here. The launchers are REAL Open MPI 4.1 and MPICH 4.0 (on PATH as
``mpiexec``/``mpirun``, as a site's MPI module puts them), and PALS EMULATED over MPICH.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness.batch_emulation import BIN
from harness.emulate import aurora_hosts, mpi_on_path, plain_lsf_job_env, plain_pbs_job_env
from support import PROBE, probe_result

from dask_hpc.batch.script import JobRequest, render

HOSTS = ["node-a", "node-b"]
# What each MPI's branch of the script runs (bash -x shows it).
LAUNCH = {
    ("pbs", "openmpi"): '+ mpiexec -n 4 --map-by ppr:2:node:pe=1 --enable-recovery --hostfile ',
    ("pbs", "mpich"): "+ mpiexec -n 4 -ppn 2 -f ",
    ("pbs", "pals"): "+ mpiexec -n 4 --ppn 2 --depth=1 --cpu-bind depth ",
    ("lsf", "openmpi"): "+ mpirun -n 4 --map-by ppr:2:node:pe=1 --enable-recovery --hostfile ",
    ("lsf", "mpich"): "+ mpiexec -n 4 -ppn 2 -f ",
}


def plain_script(batch: str, tmp_path: Path) -> Path:
    text = render(
        JobRequest(
            site="generic",
            batch_system=batch,
            nodes=2,
            workers_per_node=2,
            worker_type="cpu",
            cpus_per_worker=1,
            python=sys.executable,
            command=[sys.executable, str(PROBE)],
        )
    )
    path = tmp_path / "job.sh"
    path.write_text(text)
    return path


def job_env(batch: str, mpi: str, cluster_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    env = dict(cluster_env)
    if batch == "pbs":
        hosts = aurora_hosts(2) if mpi == "pals" else HOSTS
        env.update(plain_pbs_job_env(tmp_path, hosts, 2))
    else:
        env.update(plain_lsf_job_env(tmp_path, HOSTS, 2))
    if mpi == "pals":  # EMULATED PALS mpiexec (its path holds /pals/, as on Aurora)
        env["PATH"] = f"{BIN / 'pals'}:{env['PATH']}"
        env["DASK_HPC_EMU_JOBDIR"] = str(tmp_path)
        env["DASK_HPC_EMU_PYTHON"] = sys.executable
    else:
        env.update(mpi_on_path(tmp_path / "mpi-bin", mpi))
        env["PATH"] = f"{tmp_path / 'mpi-bin'}:{env['PATH']}"
    return env


@pytest.mark.parametrize("batch, mpi", sorted(LAUNCH), ids=lambda v: v)
def test_plain_script_runs_under_the_sites_mpi_emulated(
    batch: str, mpi: str, run_cmd, cluster_env, tmp_path: Path
) -> None:
    script = plain_script(batch, tmp_path)
    env = job_env(batch, mpi, cluster_env, tmp_path)
    result = run_cmd(["bash", "-x", str(script)], env=env, cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    assert LAUNCH[batch, mpi] in result.stderr, result.stderr
    probe = probe_result(result.stdout)
    assert probe["n_workers"] == 4 and probe["sum_squares"] == sum(i * i for i in range(100))
    assert all(w["nthreads"] == 1 for w in probe["workers"].values())  # --nthreads 1 asked


def test_an_unknown_mpiexec_stops_the_job_in_one_line(run_cmd, cluster_env, tmp_path) -> None:
    script = plain_script("pbs", tmp_path)
    env = {**cluster_env, **plain_pbs_job_env(tmp_path, HOSTS, 2)}
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpiexec").write_text("#!/bin/sh\necho 'Foo MPI 1.0'\n")
    (fake / "mpiexec").chmod(0o755)
    env["PATH"] = f"{fake}:{env['PATH']}"
    result = run_cmd(["bash", str(script)], env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        f"dask-hpc: mpiexec is none of openmpi, mpich, pals ({fake}/mpiexec Foo MPI 1.0); "
        "load the site's MPI module, or name the launcher (--launcher)"
    )
