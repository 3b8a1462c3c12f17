"""pytest-testinfra (chroot backend) checks of the converged Debian 12 and Ubuntu 22.04 targets."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import testinfra
from ansible_support import Env, live_sysctls, sha256

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(900)]

PACKAGES = ["squashfs-tools", "uidmap", "fuse3", "procps", "python3-venv"]
DEEPOPS = ["launch-dask-cluster.sh", "launch-dask-scheduler.sh", "launch-dask-cuda-worker.sh"]


@pytest.fixture(scope="module", params=["debian12", "ubuntu2204"])
def node(request: pytest.FixtureRequest, converged: Env) -> testinfra.host.Host:
    """A testinfra host on one converged root filesystem."""
    return testinfra.get_host(str(converged.targets[request.param].root), connection="chroot")


def name_of(node: testinfra.host.Host, env: Env) -> str:
    """The target name of a testinfra host."""
    return next(n for n, t in env.targets.items() if str(t.root) == node.backend.name)


@pytest.mark.parametrize("package", PACKAGES)
def test_runtime_packages_installed(node: testinfra.host.Host, package: str) -> None:
    """Apptainer's run-time needs and Python's venv are installed."""
    assert node.package(package).is_installed


def test_shared_directory(node: testinfra.host.Host) -> None:
    """Group-owned, setgid (and sticky), not world-accessible; images written by root only."""
    assert node.group("dask-hpc").exists
    parent = node.file("/shared")
    assert parent.is_directory and parent.user == "root" and parent.mode == 0o755
    shared = node.file("/shared/dask-hpc")
    assert shared.is_directory
    assert (shared.user, shared.group, shared.mode) == ("root", "dask-hpc", 0o3770)
    assert shared.mode & 0o2000 and not shared.mode & 0o007
    images = node.file("/shared/dask-hpc/images")
    assert (images.user, images.group, images.mode) == ("root", "dask-hpc", 0o2750)


def test_site_image_installed_with_its_checksum(node: testinfra.host.Host, converged: Env) -> None:
    """The image (copied on Debian, downloaded on Ubuntu) is there, intact, group-readable only."""
    image = node.file("/shared/dask-hpc/images/dask-hpc.sif")
    assert image.is_file
    assert (image.user, image.group, image.mode) == ("root", "dask-hpc", 0o640)
    assert image.sha256sum == sha256(converged.image)


def test_limits_files(node: testinfra.host.Host) -> None:
    """Open files in limits.d; somaxconn and the extra setting in sysctl.d; user namespaces."""
    limits = node.file("/etc/security/limits.d/90-dask-hpc.conf")
    assert (limits.user, limits.mode) == ("root", 0o644)
    assert re.search(r"^\*\s+soft\s+nofile\s+65536$", limits.content_string, re.M)
    assert re.search(r"^\*\s+hard\s+nofile\s+1048576$", limits.content_string, re.M)
    sysctl = node.file("/etc/sysctl.d/90-dask-hpc.conf")
    assert (sysctl.user, sysctl.mode) == ("root", 0o644)
    assert re.search(r"^net\.core\.somaxconn = 4096$", sysctl.content_string, re.M)
    assert re.search(r"^net\.ipv4\.tcp_max_syn_backlog = 8192$", sysctl.content_string, re.M)
    userns = node.file("/etc/sysctl.d/90-dask-hpc-userns.conf").content_string
    assert re.search(r"^user\.max_user_namespaces = 15000$", userns, re.M)
    assert re.search(r"^kernel\.unprivileged_userns_clone = 1$", userns, re.M)


def test_sysctls_not_applied_to_the_host_kernel(converged: Env) -> None:
    """The targets are chroots: the live values of this machine are untouched."""
    assert live_sysctls() == converged.live_sysctl_before
    run = converged.converge
    assert run is not None
    handler = run.output.split("RUNNING HANDLER [dask_hpc : Apply sysctl settings]", 1)[1]
    assert "changed:" not in handler.split("PLAY RECAP", 1)[0], run.describe()


def run_like_a_user(root: str, command: str) -> subprocess.CompletedProcess[str]:
    """Run command in the target as a login shell would, with the /proc a real node has (in a
    private mount and PID namespace, so nothing stays mounted)."""
    return subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", f"--mount-proc={root}/proc", "chroot", root]
        + ["env", "-i", "HOME=/root", "PATH=/usr/local/bin:/usr/bin:/bin", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_wrapper_runs_start_cluster_help(node: testinfra.host.Host) -> None:
    """Users run `start-cluster` from a plain PATH; --help comes from the real CLI."""
    wrapper = node.file("/opt/dask-hpc/bin/start-cluster")
    assert (wrapper.user, wrapper.mode) == ("root", 0o755)
    link = node.file("/usr/local/bin/start-cluster")
    assert link.is_symlink and link.linked_to == "/opt/dask-hpc/bin/start-cluster"
    assert node.file("/opt/dask-hpc/venv/bin/start-cluster").mode == 0o755
    result = run_like_a_user(node.backend.name, "start-cluster --help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: start-cluster {cpu,gpu}"), result.stdout
    venv = run_like_a_user(node.backend.name, "/opt/dask-hpc/venv/bin/python -m dask_hpc --help")
    assert venv.returncode == 0 and venv.stdout == result.stdout, venv.stderr


def test_wrapper_matches_gpu_detection(node: testinfra.host.Host, converged: Env) -> None:
    """The forced GPU node says so; the Debian node found no GPU in its (empty) /sys."""
    text = node.file("/opt/dask-hpc/bin/start-cluster").content_string
    gpu = name_of(node, converged) == "ubuntu2204"
    assert ("an NVIDIA GPU node" in text) is gpu
    assert ("a node without GPUs" in text) is not gpu
    fact = node.run("/etc/ansible/facts.d/dask_hpc.fact")
    assert fact.rc == 0 and json.loads(fact.stdout) == {"nvidia_gpus": 0, "amd_gpus": 0}


@pytest.mark.parametrize("script", DEEPOPS)
def test_deepops_launch_scripts(node: testinfra.host.Host, script: str) -> None:
    """The DeepOps scripts: root-owned, executable, valid sh, calling the wrapper."""
    directory = node.file("/usr/share/deepops")
    assert directory.mode == 0o755 and directory.user == "root"
    f = node.file(f"/usr/share/deepops/{script}")
    assert (f.user, f.group, f.mode) == ("root", "root", 0o755)
    assert "/opt/dask-hpc/bin/start-cluster" in f.content_string
    assert node.run(f"sh -n /usr/share/deepops/{script}").rc == 0


def test_deepops_worker_script_usage(node: testinfra.host.Host) -> None:
    """launch-dask-cuda-worker.sh without its arguments explains itself."""
    result = node.run("/usr/share/deepops/launch-dask-cuda-worker.sh")
    assert result.rc == 2 and "usage:" in result.stderr


def test_deepops_worker_script_reaches_start_cluster(node: testinfra.host.Host) -> None:
    """The worker script hands its scheduler file to start-cluster's --join, which checks it."""
    missing = "/shared/dask-hpc/no-such-cluster.json"
    result = run_like_a_user(
        node.backend.name, f"/usr/share/deepops/launch-dask-cuda-worker.sh {missing} 1"
    )
    assert result.returncode != 0
    assert result.stderr.startswith("start-cluster: error:"), result.stderr
    assert missing in result.stderr, result.stderr


def test_lmod_module_on_the_node_that_asked(node: testinfra.host.Host, converged: Env) -> None:
    """Ubuntu asked for an Lmod module: it puts the wrapper's directory on PATH."""
    module = node.file("/usr/share/modulefiles/dask-hpc/0.1.0.lua")
    if name_of(node, converged) == "ubuntu2204":
        assert module.mode == 0o644
        assert 'prepend_path("PATH", "/opt/dask-hpc/bin")' in module.content_string
    else:
        assert not module.exists
