"""Each site's job script runs as rendered (issue 35): the real Apptainer and the local image,
the site's directories bound, its modules loaded, its ranks placed on CPUs and GPUs as its
guide says, and the job's COMMAND (tests/jobs/probe.py) reporting every worker.

What runs for real: Apptainer 1.4.5 (tests/setup/apptainer.sh), the local image, Slurm for the
Slurm sites (a test Slurm whose node has the sites' features, gpu and nvme, and 4 EMULATED
GPUs as GRES), Open MPI for Sophia and ThetaGPU. EMULATED, as they cannot run here: PBS Pro,
LSF and Cobalt (their job environments; the script runs under bash as the batch system would
run it), HPE PALS and IBM jsrun (over MPICH and Open MPI, tests/harness), ``module`` (a stand-in
that records what it is asked), the GPUs (none here: the profile's count, or Slurm's GRES), and
the site's directories outside Apptainer's default binds: made on this host for the test
(/sw/dask-hpc, /local/scratch, /mnt/bb/$USER, $MEMBERWORK), removed after, and made visible to
the test machine's Apptainer (which runs in a root filesystem of its own: SIDROOT_EXTRA_BINDS).
A control shows each of them unusable in the container without the script's --bind.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from build_support import require_apptainer
from harness.batch_emulation import BIN
from harness.emulate import (
    aurora_hosts,
    cobalt_job_env,
    lsf_job_env,
    mpi_on_path,
    pbs_job_env,
    plain_pbs_job_env,
    summit_hosts,
)
from harness.slurm import SlurmCluster
from support import PROBE, probe_result

from dask_hpc.batch.script import JobRequest, render
from dask_hpc.planning.sites import load_site

pytestmark = [pytest.mark.apptainer, pytest.mark.timeout(600)]

USER = os.environ.get("USER") or "root"
MEMBERWORK = "/mnt/dask-hpc-memberwork"  # Summit's $MEMBERWORK here
# The profiles' directories outside Apptainer's default binds, by site (as the profiles say).
SITE_DIRS = {
    "deepops": ["/sw/dask-hpc"],
    "polaris": ["/local/scratch"],
    "sophia": ["/local/scratch"],
    "thetagpu": ["/local/scratch"],
    "frontier": [f"/mnt/bb/{USER}"],
    "summit": [MEMBERWORK, f"/mnt/bb/{USER}"],
}
# What each site's script asks `module` for, in order (the profile's setup lines).
MODULES = {
    "aurora": ["load apptainer"],
    "polaris": ["use /soft/modulefiles", "load spack-pe-base apptainer"],
    "sophia": [
        "use /soft/spack/base/0.7.1/install/modulefiles/Core",
        "load apptainer",
        "load compilers/openmpi",
    ],
    "summit": ["load apptainer"],
}


@pytest.fixture(scope="module")
def site_dirs() -> Iterator[dict[str, str]]:
    """The sites' directories, made on this host (EMULATED: a node's /local/scratch, the
    DeepOps role's /sw/dask-hpc, Frontier's NVMe), removed after; the environment that makes
    them visible to this machine's Apptainer."""
    require_apptainer()
    made: list[Path] = []
    paths = sorted({p for dirs in SITE_DIRS.values() for p in dirs})
    for path in map(Path, paths):
        top = next((p for p in [*reversed(path.parents), path] if not p.exists()), None)
        if top is None:
            continue  # there already (a test machine that has one): used as it is
        made.append(top)
        path.mkdir(parents=True)
        # a node's scratch is everyone's (sticky); the others are the user's, or root's
        path.chmod(0o1777 if path.name == "scratch" else 0o755)
    try:
        yield {"SIDROOT_EXTRA_BINDS": " ".join(paths), "MEMBERWORK": MEMBERWORK, "USER": USER}
    finally:
        for top in reversed(made):
            shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def site_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A Slurm node as the Slurm sites' scripts ask for: features gpu (Perlmutter's
    --constraint) and nvme (Frontier's -C), 4 GPUs (GRES over made-up devices), 64 CPUs."""
    root = tmp_path_factory.mktemp("site-slurm")
    with SlurmCluster(root, nodes=1, cpus=64, gpus=4, features="gpu,nvme") as cluster:
        yield cluster


def module_stand_in(directory: Path) -> Path:
    """EMULATED ``module`` (Lmod's): records each call in ``modules.log`` beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "modules.log"
    stand_in = directory / "module"
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    stand_in.chmod(0o755)
    return log


def job_env(cluster_env: dict[str, str], site_dirs: dict[str, str]) -> dict[str, str]:
    env = {**cluster_env, **site_dirs}
    env.pop("DASK_HPC__SCHEDULER_DIRECTORY")  # the profile's scheduler directory, as at the site
    env["DASK_HPC__TIMEOUT"] = "240"  # containers start one by one on 2 cores
    return env


def site_script(site: str, image: Path, tmp_path: Path, **kw: object) -> str:
    """The site's script for 1 node, 2 workers (gpu where it has GPUs), running the probe."""
    probe = tmp_path / "probe.py"
    shutil.copy(PROBE, probe)  # the image sees /tmp, not the checkout
    kw.setdefault("workers_per_node", 2)
    if load_site(site).account_required:  # ALCF's sites refuse a job that names no project
        kw.setdefault("account", "proj")
    return render(
        JobRequest(
            site=site,
            nodes=1,
            image=str(image),
            walltime="10",
            command=["python3", str(probe)],
            **kw,
        )
    )  # type: ignore[arg-type]


def checked(probe: dict, env_var: str | None, expected: dict[str, str] | None = None) -> None:
    """Two workers that computed, each pinned by ``env_var`` (to ``expected`` by name)."""
    assert probe["n_workers"] == 2 and probe["sum_squares"] == sum(i * i for i in range(100))
    if env_var:
        pins = {name: w["env"].get(env_var) for name, w in probe["workers"].items()}
        assert None not in pins.values() and len(set(pins.values())) == 2, pins
        if expected is not None:
            assert pins == expected, pins


def in_local_directory(probe: dict, base: str) -> bool:
    """Whether every worker's directory is in the site's local directory ``base``."""
    return all(w["local_directory"].startswith(f"{base}/") for w in probe["workers"].values())


# ---------------------------------------------------------------- PBS Pro + PALS (ALCF)
@pytest.mark.parametrize("site", ["aurora", "polaris"])
def test_alcf_pals_site_script_runs_emulated(
    site: str, local_image: Path, site_dirs, run_cmd, cluster_env, tmp_path: Path
) -> None:
    """PBS Pro's job environment, HPE PALS's mpiexec (EMULATED over MPICH; it binds each
    rank to its --cpu-bind list folded onto this host's CPUs), the stand-in module."""
    script = site_script(site, local_image, tmp_path)
    log = module_stand_in(tmp_path / "site-bin")
    env = job_env(cluster_env, site_dirs)
    env.update(pbs_job_env(tmp_path, aurora_hosts(1), f"4242.{site}-pbs", 64))
    env.update(
        PBS_O_WORKDIR=str(tmp_path),
        DASK_HPC_EMU_JOBDIR=str(tmp_path),
        DASK_HPC_EMU_PYTHON=sys.executable,
    )
    env["PATH"] = f"{BIN / 'pals'}:{tmp_path / 'site-bin'}:{env['PATH']}"
    (tmp_path / "job.pbs").write_text(script)
    result = run_cmd(["bash", "-x", "job.pbs"], env=env, cwd=tmp_path, timeout=420)
    assert result.returncode == 0, result.stderr[-6000:]
    assert log.read_text().splitlines() == MODULES.get(site, [])
    probe = probe_result(result.stdout)
    if site == "aurora":  # one rank per socket, never on cores 0 and 52 (ALCF's lists)
        assert "+ mpiexec -n 2 --ppn 2 --cpu-bind list:1-51:53-103 apptainer exec " in (
            result.stderr
        )
        checked(probe, "ZE_AFFINITY_MASK", {"0": "0", "1": "1"})
        assert {w["env"]["ZE_FLAT_DEVICE_HIERARCHY"] for w in probe["workers"].values()} == {
            "COMPOSITE"
        }
    else:  # ALCF's set_affinity_gpu_polaris.sh: local rank i gets GPU 3-i; 8 cores a rank
        assert "+ mpiexec -n 2 --ppn 2 --depth=8 --cpu-bind depth apptainer exec --nv " in (
            result.stderr
        )
        checked(probe, "CUDA_VISIBLE_DEVICES", {"0": "3", "1": "2"})
        assert in_local_directory(probe, "/local/scratch"), probe


# ---------------------------------------------------------------- PBS Pro + Open MPI (Sophia)
def test_sophia_script_runs_with_open_mpi_emulated(
    local_image: Path, site_dirs, run_cmd, cluster_env, tmp_path: Path
) -> None:
    """PBS Pro's job environment (EMULATED), REAL Open MPI as compilers/openmpi puts it on
    PATH, the stand-in module; 1 CPU a rank (this host has 2)."""
    script = site_script("sophia", local_image, tmp_path, cpus_per_worker=1)
    log = module_stand_in(tmp_path / "site-bin")
    env = job_env(cluster_env, site_dirs)
    env.update(plain_pbs_job_env(tmp_path, ["sophia-gpu-01"], 1))
    env.update(PBS_O_HOST="sophia-login-01", PBS_O_WORKDIR=str(tmp_path))
    env.update(mpi_on_path(tmp_path / "mpi-bin", "openmpi"))
    env["PATH"] = f"{tmp_path / 'mpi-bin'}:{tmp_path / 'site-bin'}:{env['PATH']}"
    (tmp_path / "job.pbs").write_text(script)
    result = run_cmd(["bash", "job.pbs"], env=env, cwd=tmp_path, timeout=420)
    assert result.returncode == 0, result.stderr[-6000:]
    assert log.read_text().splitlines() == MODULES["sophia"]
    probe = probe_result(result.stdout)
    # ALCF's Sophia Dask guide: CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK
    checked(probe, "CUDA_VISIBLE_DEVICES", {"0": "0", "1": "1"})
    assert in_local_directory(probe, "/local/scratch"), probe


# ---------------------------------------------------------------- Slurm (real)
def _slurm_run(site_slurm: SlurmCluster, script: str, env: dict[str, str], tmp_path: Path) -> str:
    job = site_slurm.sbatch(script, env={**env, **site_slurm.env}, cwd=tmp_path)
    state = site_slurm.wait_job(job, timeout=420)
    output = site_slurm.job_output(job)
    assert state == ("COMPLETED", 0), output[-6000:]
    return output


@pytest.mark.slurm
@pytest.mark.parametrize("site", ["deepops", "frontier", "perlmutter"])
def test_slurm_site_script_runs_on_slurm(
    site: str,
    local_image: Path,
    site_dirs,
    site_slurm,
    cluster_env,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Submitted with sbatch to a real Slurm: its directives (Perlmutter's --constraint=gpu,
    Frontier's -C nvme, the GPUs) must be ones Slurm takes; srun starts the ranks."""
    monkeypatch.setenv("SLURM_CONF", site_slurm.env["SLURM_CONF"])  # DeepOps asks sinfo
    env = job_env(cluster_env, site_dirs)
    if site == "perlmutter":  # no image there (NERSC runs podman-hpc and Shifter)
        env["SCRATCH"] = str(tmp_path / "scratch")
        Path(env["SCRATCH"]).mkdir()
        script = render(
            JobRequest(
                site=site,
                nodes=1,
                workers_per_node=2,
                walltime="10",
                command=[sys.executable, str(PROBE)],
            )
        )
        assert "apptainer" not in script
    else:
        script = site_script(site, local_image, tmp_path)
    output = _slurm_run(site_slurm, script, env, tmp_path)
    probe = probe_result(output)
    if site == "frontier":  # Slurm gives each task its GPU: srun --gpus-per-task=1 --gpu-bind
        assert "--gpus-per-task=1 --gpu-bind=closest apptainer exec --rocm " in script
        checked(probe, "ROCR_VISIBLE_DEVICES")
        assert output.count("ROCm devices from the environment: ") == 2, output  # Slurm's
        assert in_local_directory(probe, f"/mnt/bb/{USER}"), probe
    elif site == "deepops":
        checked(probe, "CUDA_VISIBLE_DEVICES")
        assert re.search(r"scheduler file +/sw/dask-hpc/dask-hpc-\S+/scheduler\.json", output)
    else:
        checked(probe, "CUDA_VISIBLE_DEVICES")
        assert re.search(rf"scheduler file +{env['SCRATCH']}/dask-hpc-\S+/scheduler\.json", output)


# ---------------------------------------------------------------- retired: LSF, Cobalt
def test_summit_script_runs_with_jsrun_emulated(
    local_image: Path, site_dirs, run_cmd, cluster_env, tmp_path: Path
) -> None:
    """LSF's job environment and IBM jsrun, EMULATED (over Open MPI); the stand-in module."""
    script = site_script("summit", local_image, tmp_path)
    log = module_stand_in(tmp_path / "site-bin")
    env = job_env(cluster_env, site_dirs)
    env.update(lsf_job_env(tmp_path, summit_hosts(1), "1234567", 42))
    env.update(DASK_HPC_EMU_JOBDIR=str(tmp_path), DASK_HPC_EMU_PYTHON=sys.executable)
    env["PATH"] = f"{BIN / 'lsf'}:{tmp_path / 'site-bin'}:{env['PATH']}"
    (tmp_path / "job.lsf").write_text(script)
    result = run_cmd(["bash", "job.lsf"], env=env, cwd=tmp_path, timeout=420)
    assert result.returncode == 0, result.stderr[-6000:]
    assert log.read_text().splitlines() == MODULES["summit"]
    probe = probe_result(result.stdout)
    checked(probe, "CUDA_VISIBLE_DEVICES")
    assert in_local_directory(probe, f"/mnt/bb/{USER}"), probe
    assert re.search(rf"scheduler file +{MEMBERWORK}/dask-hpc-\S+/scheduler\.json", result.stderr)


def test_thetagpu_script_runs_with_open_mpi_emulated(
    local_image: Path, site_dirs, run_cmd, cluster_env, tmp_path: Path
) -> None:
    """Cobalt's job environment (EMULATED), REAL Open MPI's mpirun; 1 CPU a rank."""
    script = site_script("thetagpu", local_image, tmp_path, cpus_per_worker=1)
    env = job_env(cluster_env, site_dirs)
    env.update(cobalt_job_env(tmp_path, 1))
    env.update(mpi_on_path(tmp_path / "mpi-bin", "openmpi"))
    env["PATH"] = f"{tmp_path / 'mpi-bin'}:{env['PATH']}"
    (tmp_path / "job.sh").write_text(script)
    result = run_cmd(["bash", "job.sh"], env=env, cwd=tmp_path, timeout=420)
    assert result.returncode == 0, result.stderr[-6000:]
    probe = probe_result(result.stdout)
    checked(probe, "CUDA_VISIBLE_DEVICES", {"0": "0", "1": "1"})
    assert in_local_directory(probe, "/local/scratch"), probe


# ---------------------------------------------------------------- the control
@pytest.mark.parametrize("site", sorted(SITE_DIRS))
def test_without_its_binds_the_sites_directories_are_unusable_in_the_image(
    site: str, local_image: Path, site_dirs, run_cmd, cluster_env, tmp_path: Path
) -> None:
    """What the script's --bind is for: in the container, a rank that plans with the site's
    profile refuses its directories (read-only file system: the image's), and accepts them
    with the binds the script makes."""
    env = job_env(cluster_env, site_dirs)
    plan = ["start-cluster", "cpu", "1", "--site", site, "--launcher", "none", "--dry-run"]
    bare = run_cmd(["apptainer", "exec", str(local_image), *plan], env=env, cwd=tmp_path)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    assert "is not usable (read-only file system)" in bare.stderr, bare.stderr
    binds = ",".join(SITE_DIRS[site])
    bound = run_cmd(
        ["apptainer", "exec", "--bind", binds, str(local_image), *plan], env=env, cwd=tmp_path
    )
    assert bound.returncode == 0, bound.stderr
