"""start-cluster under real launchers (Open MPI, MPICH, Slurm) and EMULATED ones (PALS, jsrun,
Cobalt) built over real launchers; every run is a real Dask cluster doing real work."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from harness.emulate import emulated_jsrun, emulated_pals
from harness.mpi import mpich, openmpi, openmpi_nodes
from support import probe, probe_result, start_cluster

LOOPBACK = ["--interface", "lo", "--local-directory"]


def cluster_args(tmp_path: Path, *args: str) -> list[str]:
    return [*start_cluster(), *args, *LOOPBACK, str(tmp_path / "local")]


def check(result, workers: int, code: int = 0) -> dict:
    assert result.returncode == code, f"{result.stdout}\n{result.stderr}"
    out = probe_result(result.stdout)
    assert out["n_workers"] == workers
    assert out["sum_squares"] == 328350
    assert result.stderr.count("Dask cluster ready") == 1  # rank 0 only
    return out


@pytest.mark.mpi
def test_openmpi_one_worker_per_rank(run_cmd, cluster_env, tmp_path: Path) -> None:
    result = run_cmd(
        [*openmpi(3), *cluster_args(tmp_path, "cpu", "3"), "--", *probe()],
        env=cluster_env,
        timeout=120,
    )
    assert check(result, 3)["names"] == ["0", "1", "2"]


@pytest.mark.mpi
def test_mpich_one_worker_per_rank_and_exit_status(run_cmd, cluster_env, tmp_path: Path) -> None:
    result = run_cmd(
        [*mpich(3), *cluster_args(tmp_path, "cpu", "3"), "--", *probe("5")],
        env=cluster_env,
        timeout=120,
    )
    assert check(result, 3, code=5)["names"] == ["0", "1", "2"]


@pytest.mark.mpi
def test_mpich_emulated_nodes_one_rank_per_node(run_cmd, cluster_env, tmp_path: Path) -> None:
    launcher = mpich(2, hosts=["nodeA", "nodeB"], ppn=1)
    result = run_cmd(
        [*launcher, *cluster_args(tmp_path, "cpu", "2"), "--", *probe()],
        env=cluster_env,
        timeout=120,
    )
    assert check(result, 4)["names"] == ["0-0", "0-1", "1-0", "1-1"]


@pytest.mark.mpi
def test_mpich_emulated_nodes_worker_per_rank(run_cmd, cluster_env, tmp_path: Path) -> None:
    launcher = mpich(4, hosts=["nodeA", "nodeB"], ppn=2)
    result = run_cmd(
        [*launcher, *cluster_args(tmp_path, "cpu", "2"), "--", *probe()],
        env=cluster_env,
        timeout=120,
    )
    assert check(result, 4)["names"] == ["0", "1", "2", "3"]


@pytest.mark.slurm
def test_srun_one_worker_per_task(slurm_cluster, cluster_env, tmp_path: Path) -> None:
    env = {**cluster_env, **slurm_cluster.env}
    result = slurm_cluster.srun(
        [
            "-N",
            "1",
            "-n",
            "3",
            "--kill-on-bad-exit=1",
            *cluster_args(tmp_path, "cpu", "3"),
            "--",
            *probe(),
        ],
        env=env,
        timeout=120,
    )
    assert check(result, 3)["names"] == ["0", "1", "2"]


@pytest.mark.slurm
def test_srun_two_nodes_one_task_each_and_exit_status(
    slurm_cluster, cluster_env, tmp_path: Path
) -> None:
    env = {**cluster_env, **slurm_cluster.env}
    result = slurm_cluster.srun(
        [
            "-N",
            "2",
            "--ntasks-per-node",
            "1",
            "--kill-on-bad-exit=1",
            *cluster_args(tmp_path, "cpu", "2"),
            "--",
            *probe("3"),
        ],
        env=env,
        timeout=120,
    )
    assert check(result, 4, code=3)["names"] == ["0-0", "0-1", "1-0", "1-1"]


def _batch_script(launch: list[str], tmp_path: Path) -> str:
    return (
        "#!/bin/sh\nset -e\n"
        + shlex.join([*launch, *cluster_args(tmp_path, "cpu", "2"), "--", *probe()])
        + "\n"
    )


@pytest.mark.slurm
def test_sbatch_with_srun_inside(slurm_cluster, cluster_env, tmp_path: Path) -> None:
    env = {**cluster_env, **slurm_cluster.env}
    script = _batch_script(["srun", "--kill-on-bad-exit=1"], tmp_path)
    job = slurm_cluster.sbatch(script, ["-N", "2", "--ntasks-per-node", "2"], env=env)
    state, code = slurm_cluster.wait_job(job, timeout=120)
    output = slurm_cluster.job_output(job)
    assert (state, code) == ("COMPLETED", 0), output
    assert probe_result(output)["n_workers"] == 4


@pytest.mark.slurm
@pytest.mark.mpi
@pytest.mark.parametrize("mpiexec", ["openmpi", "mpich"])
def test_sbatch_with_mpiexec_inside(
    slurm_cluster, cluster_env, tmp_path: Path, mpiexec: str
) -> None:
    """The trap: the batch script's SLURM_PROCID=0 reaches every MPI rank."""
    env = {**cluster_env, **slurm_cluster.env}
    launch = openmpi(2) if mpiexec == "openmpi" else mpich(2)
    job = slurm_cluster.sbatch(_batch_script(launch, tmp_path), ["-N", "1", "-n", "2"], env=env)
    state, code = slurm_cluster.wait_job(job, timeout=120)
    output = slurm_cluster.job_output(job)
    assert (state, code) == ("COMPLETED", 0), output
    out = probe_result(output)
    assert out["n_workers"] == 2 and out["names"] == ["0", "1"]
    assert output.count("Dask cluster ready") == 1


@pytest.mark.mpi
def test_emulated_pals_aurora_gpu_tiles(run_cmd, cluster_env, tmp_path: Path) -> None:
    """EMULATED PALS mpiexec -n 6 --ppn 3 on two Aurora nodes, one worker per GPU."""
    launcher = emulated_pals(tmp_path, nodes=2, ppn=3)
    result = run_cmd(
        [*launcher, *cluster_args(tmp_path, "gpu", "3", "--site", "aurora"), "--", *probe()],
        env=cluster_env,
        timeout=120,
    )
    out = check(result, 6)
    masks = {name: w["env"]["ZE_AFFINITY_MASK"] for name, w in out["workers"].items()}
    assert masks == {"0": "0", "1": "1", "2": "2", "3": "0", "4": "1", "5": "2"}
    assert {w["env"]["ZE_FLAT_DEVICE_HIERARCHY"] for w in out["workers"].values()} == {"COMPOSITE"}
    assert {w["spill"] for w in out["workers"].values()} == {False}  # no node-local storage
    assert {tuple(w["resources"].items()) for w in out["workers"].values()} == {(("GPU", 1.0),)}


@pytest.mark.mpi
def test_emulated_jsrun_summit_keeps_g1_devices(run_cmd, cluster_env, tmp_path: Path) -> None:
    """EMULATED jsrun -n 4 -a1 -g1 on two Summit nodes: the launcher's device is kept."""
    launcher = emulated_jsrun(tmp_path, nodes=2, ppn=2, gpus_per_task=1, mpi="mpich")
    result = run_cmd(
        [*launcher, *cluster_args(tmp_path, "gpu", "2", "--site", "summit"), "--", *probe()],
        env=cluster_env,
        timeout=120,
    )
    out = check(result, 4)
    devices = {name: w["env"]["CUDA_VISIBLE_DEVICES"] for name, w in out["workers"].items()}
    assert devices == {"0": "0", "1": "1", "2": "0", "3": "1"}
    assert {w["env"]["OMP_PROC_BIND"] for w in out["workers"].values()} == {"FALSE"}


@pytest.mark.mpi
def test_emulated_cobalt_thetagpu_mpirun(run_cmd, cluster_env, tmp_path: Path) -> None:
    """EMULATED Cobalt job (COBALT_* variables) around a real Open MPI mpirun -np 3."""
    nodefile = tmp_path / "cobalt-nodefile"
    nodefile.write_text("thetagpu05\n")
    cobalt = [
        "env",
        "COBALT_JOBID=10086",
        f"COBALT_NODEFILE={nodefile}",
        "COBALT_PARTNAME=thetagpu05",
        "COBALT_JOBSIZE=1",
        "COBALT_QUEUE=full-node",
    ]
    result = run_cmd(
        [
            *cobalt,
            *openmpi(3),
            *cluster_args(tmp_path, "gpu", "3", "--site", "thetagpu"),
            "--",
            *probe(),
        ],
        env=cluster_env,
        timeout=120,
    )
    out = check(result, 3)
    devices = {name: w["env"]["CUDA_VISIBLE_DEVICES"] for name, w in out["workers"].items()}
    assert devices == {"0": "0", "1": "1", "2": "2"}


@pytest.mark.mpi
def test_emulated_pbs_sophia_openmpi_mpiexec(run_cmd, cluster_env, tmp_path: Path) -> None:
    """EMULATED PBS job on two Sophia nodes (PBS_* variables, a $PBS_NODEFILE of made-up
    sophia-gpu-* hosts) around a real Open MPI mpiexec over that hostfile, 2 ranks per node,
    as `invoke job --site sophia` writes it; the site is detected from PBS_O_HOST."""
    nodefile = tmp_path / "pbs-nodefile"
    nodefile.write_text("sophia-gpu-03\nsophia-gpu-04\n")
    pbs = [
        "env",
        "PBS_JOBID=4242.sophia-pbs-01.lab.alcf.anl.gov",
        f"PBS_NODEFILE={nodefile}",
        "PBS_O_HOST=sophia-login-01.lab.alcf.anl.gov",
        "PBS_QUEUE=by-node",
    ]
    result = run_cmd(
        [
            *pbs,
            *openmpi_nodes(2, 2, hostfile=nodefile),
            *cluster_args(tmp_path, "gpu", "2"),
            "--",
            *probe(),
        ],
        env=cluster_env,
        timeout=180,
    )
    out = check(result, 4)
    devices = sorted(w["env"]["CUDA_VISIBLE_DEVICES"] for w in out["workers"].values())
    assert devices == ["0", "0", "1", "1"]  # one GPU per local rank, per node
    assert "sophia.alcf.anl.gov" in result.stderr  # the tunnel goes through Sophia's login
