"""The image-mode wrapper (`apptainer exec [--nv] IMAGE start-cluster`), rendered by the role's
own tasks on the controller: Apptainer cannot be installed on the Debian/Ubuntu test targets."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ansible_support import CACHE, require_setup, run_playbook

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(300)]

PLAYBOOK = Path(__file__).with_name("render_wrapper.yml")


def run_role_tasks(tmp: Path, playbook: Path, **extra: object) -> None:
    """Run one of the role's task files (``playbook`` includes it) against localhost."""
    require_setup()
    (tmp / "vars.json").write_text(json.dumps({"ansible_python_interpreter": sys.executable,
                                               **extra}))
    inventory = tmp / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local\n")
    run = run_playbook(tmp, inventory, "-e", f"@{tmp / 'vars.json'}", playbook=playbook)
    assert run.returncode == 0, run.describe()


def render(tmp: Path, **settings: object) -> Path:
    """Run the role's wrapper tasks against localhost into tmp; return the prefix."""
    defaults = {
        "dask_hpc_prefix": str(tmp / "prefix"),
        "dask_hpc_shared_dir": "/shared/dask-hpc",
        "dask_hpc_wrapper_link": "",  # no link on this machine's PATH
        "dask_hpc_hpc_cluster_link": "",
        "dask_hpc_lmod": True,
        "dask_hpc_lmod_modulefiles": str(tmp / "modulefiles"),
        "dask_hpc_provider": "image",
    }
    run_role_tasks(tmp, PLAYBOOK, **{**defaults, **settings})
    return tmp / "prefix"


@pytest.fixture()
def tmp(request: pytest.FixtureRequest) -> Path:
    """A scratch directory inside the test cache (removed afterwards)."""
    d = Path(tempfile.mkdtemp(prefix="render-", dir=CACHE))
    request.addfinalizer(lambda: subprocess.run(["rm", "-rf", "--one-file-system", str(d)]))
    return d


def test_gpu_node_wrapper_execs_apptainer_with_nv(tmp: Path) -> None:
    """On an NVIDIA node: apptainer exec --nv, the shared directory and /etc/dask bound, the
    extra flags quoted, the site image, "$@"."""
    prefix = render(
        tmp,
        _dask_hpc_gpu_vendor="nvidia",
        dask_hpc_apptainer_exec_args=["--bind", "/scratch dir"],
    )
    wrapper = prefix / "bin/start-cluster"
    assert wrapper.stat().st_mode & 0o777 == 0o755
    lines = wrapper.read_text().splitlines()
    assert lines[0] == "#!/bin/sh"
    assert 'image="${DASK_HPC_IMAGE:-/shared/dask-hpc/images/dask-hpc.sif}"' in lines
    assert lines[-1] == (
        "exec apptainer exec --nv --bind /shared/dask-hpc --bind /etc/dask:/etc/dask:ro "
        '--bind \'/scratch dir\' "$image" python3 -I -m dask_hpc "$@"'
    )
    assert subprocess.run(["sh", "-n", str(wrapper)], check=False).returncode == 0
    module = (tmp / "modulefiles/dask-hpc/0.1.0.lua").read_text()
    assert f'prepend_path("PATH", "{prefix / "bin"}")' in module
    assert 'setenv("DASK_HPC_IMAGE", "/shared/dask-hpc/images/dask-hpc.sif")' in module


def test_cpu_node_wrapper_has_no_nv_and_checks_the_image(tmp: Path) -> None:
    """Without GPUs no --nv (the binds stay); an unreadable image is reported before apptainer
    runs."""
    prefix = render(tmp, _dask_hpc_gpu_vendor="none")
    wrapper = prefix / "bin/start-cluster"
    lines = wrapper.read_text().splitlines()
    assert lines[-1] == (
        'exec apptainer exec --bind /shared/dask-hpc --bind /etc/dask:/etc/dask:ro "$image" '
        'python3 -I -m dask_hpc "$@"'
    )
    def run(image: Path) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "DASK_HPC_IMAGE": str(image)}
        return subprocess.run(["sh", str(wrapper), "--help"], env=env, capture_output=True,
                              text=True, check=False)

    missing = tmp / "no-such.sif"
    result = run(missing)
    assert result.returncode == 1
    assert f"cannot read the image {missing}" in result.stderr
    assert "dask-hpc" in result.stderr  # names the group that may read images
    elsewhere = tmp / "mine.sif"  # readable, but outside root's image directory
    elsewhere.write_bytes(b"")
    result = run(elsewhere)
    assert result.returncode == 2
    assert f"{elsewhere} is not in /shared/dask-hpc/images" in result.stderr


def test_python_provider_puts_hpc_cluster_beside_start_cluster(tmp: Path) -> None:
    """hpc-cluster (HPCCluster's command) from the role's virtual environment, on PATH through
    the Lmod module too; the image provider has none (its jobs need the host's sbatch)."""
    prefix = render(tmp, dask_hpc_provider="python", _dask_hpc_gpu_vendor="none")
    wrapper = prefix / "bin/hpc-cluster"
    assert wrapper.stat().st_mode & 0o777 == 0o755
    lines = wrapper.read_text().splitlines()
    assert lines[-1] == f'exec {prefix}/venv/bin/python -I -m dask_hpc.elastic "$@"'
    assert subprocess.run(["sh", "-n", str(wrapper)], check=False).returncode == 0
    module = (tmp / "modulefiles/dask-hpc/0.1.0.lua").read_text()
    assert "hpc-cluster (and HPCCluster in Python)" in module
    other = Path(tempfile.mkdtemp(prefix="render-", dir=CACHE))
    try:
        assert not (render(other, _dask_hpc_gpu_vendor="none") / "bin/hpc-cluster").exists()
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(other)], check=False)


@pytest.mark.parametrize(
    "counts, written",
    [((8, 256), ["  node-gpus: 8", "  node-cpus: 256"]), ((0, 64), [])],
    ids=["gpu-nodes", "no-gpus"],
)
def test_dask_config_carries_the_gpu_nodes_counts(tmp: Path, counts, written) -> None:
    """hpc.node-gpus/-cpus from the nodes' counts (the role's facts), for invoke job and
    HPCCluster on the login node; none where no node has GPUs (Slurm is asked then)."""
    target = tmp / "etc/dask/dask-hpc.yaml"
    run_role_tasks(
        tmp,
        Path(__file__).with_name("render_dask_config.yml"),
        _dask_hpc_dask_config_file=str(target),
        _dask_hpc_node_gpus=counts[0],
        _dask_hpc_node_cpus=counts[1],
        dask_hpc_shared_dir="/sw/dask-hpc",
    )
    lines = target.read_text().splitlines()
    assert [line for line in lines if "node-" in line] == written
    assert '  scheduler-directory: "/sw/dask-hpc"' in lines


@pytest.mark.slurm
def test_deepops_launch_script_runs_a_cluster_over_a_slurm_allocation(
    tmp: Path, slurm_cluster, cluster_env: dict[str, str]
) -> None:
    """launch-dask-cluster.sh, rendered by the role, inside `salloc -N 2 -c 2`: one rank per
    node, each with the allocation's CPUs for its workers (a Slurm task has one unless asked:
    start-cluster refuses to start two workers on it), and the job kept if a node is lost."""
    prefix = tmp / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "start-cluster").symlink_to(shutil.which("start-cluster"))
    run_role_tasks(
        tmp,
        Path(__file__).with_name("render_deepops.yml"),
        dask_hpc_prefix=str(prefix),
        dask_hpc_deepops_dir=str(tmp / "deepops"),
    )
    launch = tmp / "deepops" / "launch-dask-cluster.sh"
    assert "--no-kill" in launch.read_text() and "--kill-on-bad-exit=1" not in launch.read_text()
    job = (
        "from distributed import Client; c = Client(); "
        "print('WORKERS', len(c.scheduler_info()['workers']))"
    )
    env = {**cluster_env, **slurm_cluster.env}
    argv = ["salloc", "-N", "2", "--ntasks-per-node", "1", "-c", "2", str(launch), "cpu", "2"]
    argv += ["--interface", "lo", "--dashboard-address", "127.0.0.1:0", "--"]
    result = subprocess.run(
        [*argv, sys.executable, "-c", job], env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WORKERS 4" in result.stdout, result.stdout + result.stderr
