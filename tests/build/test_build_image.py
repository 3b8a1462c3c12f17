"""The local image for real: built by `invoke build`, tested by Apptainer, running the product."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from build_support import REPO, require_apptainer, require_sidroot

from dask_hpc_deploy.versions import pinned_version, source_version

pytestmark = [pytest.mark.apptainer, pytest.mark.timeout(900)]

DASK_VERSIONS = "import dask, distributed; print(dask.__version__, distributed.__version__)"
PI_LINE = r"pi ~= 3\.1\d+ \(error [^)]*\) from \d+ samples on {n} worker\(s\) using numpy"


@pytest.fixture
def pi(tmp_path: Path) -> Path:
    """examples/pi.py, copied under /tmp (the Apptainer root filesystem sees /tmp)."""
    path = tmp_path / "pi.py"
    shutil.copy(REPO / "examples" / "pi.py", path)
    return path


def test_image_passes_its_own_test(run_cmd, local_image: Path) -> None:
    result = run_cmd([require_apptainer(), "test", str(local_image)], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "one-worker cluster: ok" in result.stdout
    size_mb = local_image.stat().st_size / 2**20
    assert 50 < size_mb < 400, f"{size_mb:.0f} MB"


def test_labels_environment_and_runscript(run_cmd, local_image: Path) -> None:
    labels = run_cmd([require_apptainer(), "inspect", "--labels", str(local_image)]).check()
    assert re.search(r"^org\.dask-hpc\.site: local$", labels.stdout, re.M), labels.stdout
    # the version git gives this tree, as the dask-hpc inside says it and pip installed it
    version = source_version(REPO)
    assert re.search(rf"^org\.dask-hpc\.version: {re.escape(version)}$", labels.stdout, re.M), (
        labels.stdout
    )
    dask = re.escape(pinned_version("dask"))  # constraints.txt's
    assert re.search(rf"^org\.dask-hpc\.dask: {dask}$", labels.stdout, re.M), labels.stdout
    inside = run_cmd([require_apptainer(), "exec", str(local_image), "start-cluster", "--version"])
    assert inside.check().stdout.strip() == f"dask-hpc {version}"
    pins = run_cmd(
        [require_apptainer(), "exec", str(local_image), "python", "-c", DASK_VERSIONS]
    ).check()
    assert pins.stdout.split() == [pinned_version("dask"), pinned_version("distributed")]
    env = run_cmd([require_apptainer(), "inspect", "--environment", str(local_image)]).check()
    assert "PYTHONNOUSERSITE=1" in env.stdout
    assert not re.search(
        r"(CUDA_VISIBLE|ZE_AFFINITY|ROCR_VISIBLE|PMI_|PALS_|SLURM_|OMPI_)", env.stdout
    )
    run = run_cmd([require_apptainer(), "inspect", "--runscript", str(local_image)]).check()
    assert 'exec start-cluster "$@"' in run.stdout


def test_user_site_packages_cannot_shadow_the_image(
    run_cmd, local_image: Path, tagged_env, tmp_path: Path
) -> None:
    env = {**tagged_env, "PYTHONPATH": ""}
    result = run_cmd(
        [
            require_apptainer(),
            "exec",
            str(local_image),
            "python",
            "-c",
            "import site, sys; print(site.ENABLE_USER_SITE, sys.prefix)",
        ],
        env=env,
    )
    assert result.check().stdout.split() == ["False", "/opt/dask-hpc/venv"]


def test_exec_start_cluster_runs_pi(run_cmd, cluster_env, local_image: Path, pi: Path) -> None:
    """`apptainer exec dask.sif start-cluster cpu 2 -- python examples/pi.py`."""
    result = run_cmd(
        [
            require_apptainer(),
            "exec",
            str(local_image),
            "start-cluster",
            "cpu",
            "2",
            "--",
            "python",
            str(pi),
        ],
        env=cluster_env,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(PI_LINE.format(n=2), result.stdout), result.stdout + result.stderr


def test_run_is_start_cluster(run_cmd, cluster_env, local_image: Path, pi: Path) -> None:
    result = run_cmd(
        [
            require_apptainer(),
            "run",
            str(local_image),
            "cpu",
            "1",
            "--",
            "python",
            str(pi),
            "--samples",
            "200000",
            "--tolerance",
            "0.05",
        ],
        env=cluster_env,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(PI_LINE.format(n=1), result.stdout), result.stdout + result.stderr


def test_command_failure_reaches_the_caller(run_cmd, cluster_env, local_image: Path) -> None:
    result = run_cmd(
        [
            require_apptainer(),
            "exec",
            str(local_image),
            "start-cluster",
            "cpu",
            "1",
            "--",
            "python",
            "-c",
            "raise SystemExit(7)",
        ],
        env=cluster_env,
        timeout=180,
    )
    assert result.returncode == 7, result.stdout + result.stderr


@pytest.mark.mpi
def test_mpiexec_one_container_per_rank(run_cmd, cluster_env, local_image: Path, pi: Path) -> None:
    """`mpiexec -n 3 apptainer exec dask.sif start-cluster cpu 3 -- python pi.py` (MPICH)."""
    start = time.monotonic()
    result = run_cmd(
        [
            require_sidroot(),
            "mpiexec",
            "-n",
            "3",
            "apptainer",
            "exec",
            str(local_image),
            "start-cluster",
            "cpu",
            "3",
            "--",
            "python",
            str(pi),
        ],
        env=cluster_env,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(PI_LINE.format(n=3), result.stdout), result.stdout + result.stderr
    assert result.stdout.count("pi ~=") == 1, "COMMAND must run once, not once per rank"
    assert time.monotonic() - start < 240
