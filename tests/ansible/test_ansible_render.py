"""The image-mode wrapper (`apptainer exec [--nv] IMAGE start-cluster`), rendered by the role's
own tasks on the controller: Apptainer cannot be installed on the Debian/Ubuntu test targets."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ansible_support import CACHE, require_setup, run_playbook

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(300)]

PLAYBOOK = Path(__file__).with_name("render_wrapper.yml")


def render(tmp: Path, **settings: object) -> Path:
    """Run the role's wrapper tasks against localhost into tmp; return the prefix."""
    require_setup()
    extra = {
        "dask_hpc_prefix": str(tmp / "prefix"),
        "dask_hpc_shared_dir": "/shared/dask-hpc",
        "dask_hpc_wrapper_link": "",
        "dask_hpc_lmod": True,
        "dask_hpc_lmod_modulefiles": str(tmp / "modulefiles"),
        "dask_hpc_provider": "image",
        "ansible_python_interpreter": sys.executable,
        **settings,
    }
    (tmp / "vars.json").write_text(json.dumps(extra))
    inventory = tmp / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local\n")
    run = run_playbook(tmp, inventory, "-e", f"@{tmp / 'vars.json'}", playbook=PLAYBOOK)
    assert run.returncode == 0, run.describe()
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
        '--bind \'/scratch dir\' "$image" start-cluster "$@"'
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
        'start-cluster "$@"'
    )
    missing = tmp / "no-such.sif"
    result = subprocess.run(
        ["sh", str(wrapper), "--help"],
        env={"PATH": "/usr/bin:/bin", "DASK_HPC_IMAGE": str(missing)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert f"cannot read the image {missing}" in result.stderr
    assert "dask-hpc" in result.stderr  # names the group that may read images
