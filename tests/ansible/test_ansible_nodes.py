"""The converged nodes: files, owners and modes (pytest-testinfra, chroot backend), and real
start-cluster jobs run inside them as a user would, DeepOps' scripts with the seed's command
lines on two emulated nodes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import testinfra
from conftest import NO_VARS, Env
from node_support import live_sysctls, run_on_node, sha256
from two_nodes import deepops_example

from dask_hpc.guard.import_path import BOOTSTRAP

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(1500)]

CONVERGED = (*NO_VARS, "configured")
DEEPOPS = ["launch-dask-cluster.sh", "launch-dask-scheduler.sh", "launch-dask-cuda-worker.sh"]
RUNTIME = ["squashfs-tools", "uidmap", "fuse3", "procps"]
JOB = """\
import json
from distributed import Client

client = Client()  # start-cluster tells COMMAND where the cluster is
workers = client.scheduler_info()["workers"]
total = client.submit(sum, range(101)).result()
squares = client.gather(client.map(lambda x: x * x, range(10)))
print(json.dumps({"workers": len(workers), "sum": total, "squares": sum(squares)}))
"""


@pytest.fixture(scope="module", params=CONVERGED)
def node(request: pytest.FixtureRequest, converged: Env) -> testinfra.host.Host:
    """A testinfra host on one converged root filesystem."""
    return testinfra.get_host(str(converged.targets[request.param].root), connection="chroot")


def name_of(node: testinfra.host.Host, env: Env) -> str:
    """The target name of a testinfra host."""
    return next(n for n, t in env.targets.items() if str(t.root) == node.backend.name)


def test_packages(node: testinfra.host.Host, converged: Env) -> None:
    """Python's venv everywhere; Apptainer and its run-time needs only where asked for."""
    assert node.package("python3-venv").is_installed
    configured = name_of(node, converged) == "configured"
    for package in RUNTIME[:3]:
        assert node.package(package).is_installed is configured, package
    apptainer = node.package("apptainer")
    assert apptainer.is_installed is configured
    if configured:  # the stand-in release package, fetched by the controller, copied here
        assert apptainer.version == "0.0.0~dask.hpc.test"
        copy = node.file("/opt/dask-hpc/packages/apptainer_0.0.0_all.deb")
        assert copy.sha256sum == sha256(converged.package)


def shared_dir(node: testinfra.host.Host, env: Env) -> str:
    """Where the node's shared directory is: named for the configured node, found (the first
    candidate, /sw, on a one-node cluster) for the others."""
    return "/shared/dask-hpc" if name_of(node, env) == "configured" else "/sw/dask-hpc"


def test_shared_directory(node: testinfra.host.Host, converged: Env) -> None:
    """Group-owned, setgid and sticky, not world-accessible; images written by root only."""
    group = node.group("dask-hpc")
    assert group.exists
    if name_of(node, converged) == "configured":
        assert group.gid == 2500
    where = shared_dir(node, converged)
    parent = node.file(str(Path(where).parent))
    assert parent.is_directory and parent.user == "root" and parent.mode == 0o755
    shared = node.file(where)
    assert (shared.user, shared.group, shared.mode) == ("root", "dask-hpc", 0o3770)
    images = node.file(f"{where}/images")
    assert (images.user, images.group, images.mode) == ("root", "dask-hpc", 0o2750)


def test_users_joined_the_group(node: testinfra.host.Host, converged: Env) -> None:
    """dask_hpc_users joined the group where it was set, nowhere else."""
    alice = node.user("alice")
    assert alice.exists  # every test node has the account
    assert ("dask-hpc" in alice.groups) is (name_of(node, converged) == "configured")


def test_dask_config_names_site_and_directory(node: testinfra.host.Host, converged: Env) -> None:
    """/etc/dask/dask-hpc.yaml: the DeepOps site profile and the shared scheduler directory."""
    config = node.file("/etc/dask/dask-hpc.yaml")
    assert (config.user, config.mode) == ("root", 0o644)
    text = config.content_string
    assert re.search(r'^  site: "deepops"$', text, re.M), text
    where = shared_dir(node, converged)
    assert re.search(rf'^  scheduler-directory: "{where}"$', text, re.M), text


def test_limits_and_sysctl_files(node: testinfra.host.Host, converged: Env) -> None:
    """Open files in limits.d, somaxconn in sysctl.d; user namespaces only with Apptainer."""
    limits = node.file("/etc/security/limits.d/90-dask-hpc.conf")
    assert (limits.user, limits.mode) == ("root", 0o644)
    assert re.search(r"^\*\s+soft\s+nofile\s+65536$", limits.content_string, re.M)
    assert re.search(r"^\*\s+hard\s+nofile\s+1048576$", limits.content_string, re.M)
    sysctl = node.file("/etc/sysctl.d/90-dask-hpc.conf").content_string
    assert re.search(r"^net\.core\.somaxconn = 4096$", sysctl, re.M)
    userns = node.file("/etc/sysctl.d/90-dask-hpc-userns.conf")
    if name_of(node, converged) == "configured":
        assert re.search(r"^net\.ipv4\.tcp_max_syn_backlog = 8192$", sysctl, re.M)
        assert re.search(r"^user\.max_user_namespaces = 15000$", userns.content_string, re.M)
        assert re.search(r"^kernel\.unprivileged_userns_clone = 1$", userns.content_string, re.M)
    else:
        assert not userns.exists


def test_sysctls_not_applied_to_the_host_kernel(converged: Env) -> None:
    """The targets are chroots: the live values of this machine are untouched."""
    assert live_sysctls() == converged.live_sysctl_before


def test_wrapper_and_venv(node: testinfra.host.Host, converged: Env) -> None:
    """The wrapper on PATH runs the venv's start-cluster; its GPU line matches the node."""
    wrapper = node.file("/opt/dask-hpc/bin/start-cluster")
    assert (wrapper.user, wrapper.mode) == ("root", 0o755)
    link = node.file("/usr/local/bin/start-cluster")
    assert link.is_symlink and link.linked_to == "/opt/dask-hpc/bin/start-cluster"
    gpu = name_of(node, converged) == "configured"
    assert ("an NVIDIA GPU node" in wrapper.content_string) is gpu
    fact = node.run("/etc/ansible/facts.d/dask_hpc.fact")
    assert fact.rc == 0 and json.loads(fact.stdout) == {"nvidia_gpus": 0, "amd_gpus": 0}
    result = run_on_node(Path(node.backend.name), "start-cluster --help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: start-cluster {cpu,gpu}"), result.stdout
    # hpc-cluster beside it (HPCCluster's command), the job script it would submit
    link = node.file("/usr/local/bin/hpc-cluster")
    assert link.is_symlink and link.linked_to == "/opt/dask-hpc/bin/hpc-cluster"
    script = run_on_node(
        Path(node.backend.name), "cd && hpc-cluster script cpu --batch-system slurm"
    )
    assert script.returncode == 0, script.stderr
    root = Path(node.backend.name)
    python = "/opt/dask-hpc/venv/bin/python"
    version = run_on_node(root, f"{python} -c 'import sys; print(sys.version_info >= (3, 11))'")
    if version.stdout.strip() == "True":
        assert re.search(rf"{python}\S* -P -m dask_hpc cpu 1 ", script.stdout)
        return
    # Python 3.10 (Ubuntu 22.04) has no -P: the job runs the bootstrap, which drops the
    # working directory before anything is imported; a module planted there is not run.
    line = next(s for s in script.stdout.splitlines() if f"{python} -c " in s and "runpy" in s)
    words = shlex.split(line)  # srun ... PYTHON -c BOOTSTRAP cpu 1 ...
    at = words.index(python)
    assert words[at + 1 : at + 3] == ["-c", BOOTSTRAP.format(module="dask_hpc")], line
    planted = root / "tmp" / "planted"
    planted.mkdir(exist_ok=True)
    (planted / "argparse.py").write_text("raise SystemExit('the planted module ran')\n")
    (planted / "run.sh").write_text(
        shlex.join([python, "-c", BOOTSTRAP.format(module="dask_hpc"), "--help"]) + "\n"
    )
    ran = run_on_node(root, "cd /tmp/planted && sh run.sh")
    assert ran.returncode == 0 and ran.stdout.startswith("usage: "), ran.stdout + ran.stderr
    assert "planted" not in ran.stdout + ran.stderr
    plain = run_on_node(root, f"cd /tmp/planted && {python} -m dask_hpc --help")
    assert "the planted module ran" in plain.stderr  # what python -m alone would have done


def test_wrappers_read_no_planted_module_through_an_empty_pythonpath_entry(
    node: testinfra.host.Host, converged: Env
) -> None:
    """The role's start-cluster and hpc-cluster run Python with -I: modules planted in the
    working directory, which an empty PYTHONPATH entry names, are never imported (pip's script
    would import its ``re`` from there before any code of ours); dask-hpc then drops the entry
    for every process it starts (tests/test_search_paths.py)."""
    root = Path(node.backend.name)
    planted = root / "tmp" / "planted-wrapper"
    planted.mkdir(exist_ok=True)
    for module in ("re", "argparse", "json"):
        (planted / f"{module}.py").write_text("raise SystemExit('the planted module ran')\n")
    env = {"PYTHONPATH": ":/opt/dask-hpc"}
    for command in ("start-cluster --help", "hpc-cluster --help"):
        ran = run_on_node(root, f"cd /tmp/planted-wrapper && {command}", env=env)
        assert ran.returncode == 0 and ran.stdout.startswith("usage: "), ran.stdout + ran.stderr
        assert "planted" not in ran.stdout + ran.stderr


@pytest.mark.parametrize("name", CONVERGED)
def test_start_cluster_runs_a_real_job(converged: Env, name: str) -> None:
    """`start-cluster cpu 2 -- python3 job.py` with no flags: the site profile and the shared
    scheduler directory come from /etc/dask; the job runs on 2 workers. As root on the nodes
    converged without variables, as alice (in dask_hpc_users) on the configured one."""
    root = converged.targets[name].root
    user = "alice" if name == "configured" else "root"
    where = "/shared/dask-hpc" if name == "configured" else "/sw/dask-hpc"
    home = root / ("home/alice" if user == "alice" else "root")
    (home / "job.py").write_text(JOB)
    dry = run_on_node(root, "start-cluster cpu 2 --dry-run", user=user)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["site"] == "deepops"
    assert plan["scheduler_file"].startswith(f"{where}/dask-hpc-"), plan
    result = run_on_node(
        root, "cd && start-cluster cpu 2 -- python3 job.py", user=user, timeout=240
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "workers": 2,
        "sum": 5050,
        "squares": 285,
    }, output
    assert f"scheduler file  {where}/dask-hpc-" in output, output
    assert list((root / where.lstrip("/")).glob("dask-hpc-*")) == []  # cleaned up


def test_user_outside_the_group_is_told(converged: Env) -> None:
    """On a node converged without dask_hpc_users, alice cannot write scheduler files: one line
    from start-cluster says so, nothing starts."""
    root = converged.targets["ubuntu2404"].root
    result = run_on_node(root, "start-cluster cpu 1 -- true", user="alice")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("start-cluster: error: scheduler directory")
    assert "/sw/dask-hpc" in lines[0]


@pytest.mark.parametrize("script", DEEPOPS)
def test_deepops_scripts_installed(node: testinfra.host.Host, script: str) -> None:
    """Root-owned, executable, valid sh, calling the wrapper."""
    directory = node.file("/usr/share/deepops")
    assert directory.mode == 0o755 and directory.user == "root"
    f = node.file(f"/usr/share/deepops/{script}")
    assert (f.user, f.group, f.mode) == ("root", "root", 0o755)
    assert "/opt/dask-hpc/bin/start-cluster" in f.content_string
    assert node.run(f"sh -n /usr/share/deepops/{script}").rc == 0


def test_lmod_module_on_the_node_that_asked(node: testinfra.host.Host, converged: Env) -> None:
    """The configured node asked for an Lmod module: it puts the wrapper's directory on PATH."""
    module = node.file("/usr/share/modulefiles/dask-hpc/0.1.0.lua")
    if name_of(node, converged) == "configured":
        assert module.mode == 0o644
        assert 'prepend_path("PATH", "/opt/dask-hpc/bin")' in module.content_string
    else:
        assert not module.exists


# --- DeepOps' scripts, called as DeepOps' example calls them ------------------------------------
SCRIPTS = "/usr/share/deepops"


@pytest.mark.parametrize(
    ("command", "variables", "expected"),
    [
        (
            "launch-dask-cuda-worker.sh",
            {},
            "usage: launch-dask-cuda-worker.sh SCHEDULER_FILE [WORKERS]",
        ),
        (
            "launch-dask-scheduler.sh",
            {},
            "launch-dask-scheduler.sh: no NVIDIA GPU on this node",
        ),
        (
            "launch-dask-cuda-worker.sh 10.0.0.11 8786",
            {"CUDA_VISIBLE_DEVICES": "0"},
            "launch-dask-cuda-worker.sh: none of your clusters in /shared/dask-hpc listens on "
            "10.0.0.11:8786: start one with launch-dask-scheduler.sh, or join by its scheduler "
            "file: launch-dask-cuda-worker.sh SCHEDULER_FILE [WORKERS]",
        ),
        (
            "launch-dask-cuda-worker.sh /shared/dask-hpc/no-such-cluster.json 1",
            {},
            "start-cluster: error: --join /shared/dask-hpc/no-such-cluster.json: no such "
            "scheduler file",
        ),
        (
            "launch-dask-scheduler.sh two",
            {"CUDA_VISIBLE_DEVICES": "0"},
            "launch-dask-scheduler.sh: WORKERS must be a positive number, not 'two'",
        ),
    ],
)
def test_deepops_scripts_refuse_in_one_line(
    converged: Env, command: str, variables: dict[str, str], expected: str
) -> None:
    """Without a GPU, a cluster or a valid argument, one line says what to do; nothing starts."""
    root = converged.targets["configured"].root
    result = run_on_node(root, f"{SCRIPTS}/{command}", user="alice", env=variables)
    assert result.returncode == 2 or result.stderr.startswith("start-cluster: error:")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr


def test_deepops_seed_command_lines_on_two_nodes(converged: Env) -> None:
    """DeepOps' example, verbatim, on two emulated nodes (their own network namespaces and host
    names, joined by a veth pair, sharing the node's file system as NFS would), one GPU each
    (CUDA_VISIBLE_DEVICES=0; no GPU is touched: plain Dask workers, as without dask-cuda):

        ssh virtual-gpu01 /usr/share/deepops/launch-dask-scheduler.sh &
        ssh virtual-gpu01 /usr/share/deepops/launch-dask-cuda-worker.sh 10.0.0.11 8786 &
        ssh virtual-gpu02 /usr/share/deepops/launch-dask-cuda-worker.sh 10.0.0.11 8786 &

    The scheduler and one worker start on gpu01, the worker call there starts nothing more, the
    one on gpu02 joins: two workers, one per node. A client shuts the cluster down; everything
    exits."""
    root = converged.targets["configured"].root
    deepops_example(root, root, "alice", "/shared/dask-hpc")
