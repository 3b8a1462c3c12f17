"""A stock DeepOps layout, converged as a DeepOps admin runs Ansible: ansible-core 2.17 (DeepOps'
pin), DeepOps' ansible.cfg, an inventory of slurm-master[0] and one slurm-node, no variables.

slurm-master[0] exports /sw (DeepOps' nfs_exports) and the node mounts it: over sshfs here (no
NFS in this kernel; two_nodes.SshfsShare says what differs). The role must find /sw as
the shared directory on both, accept the master's own export (a local disk there), give the
group one id on both (the master has one system group more), and a cluster must span them."""

from __future__ import annotations

import json
import re

import pytest
from ansible_support import PlaybookRun, warnings
from conftest import DEEPOPS, Env
from node_support import run_on_node
from two_nodes import deepops_example

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(1500)]


def test_first_converge_with_no_variables(first_runs: dict[str, PlaybookRun]) -> None:
    """Both nodes converge, with no warning under DeepOps' ansible.cfg."""
    run = first_runs["converge_deepops"]
    assert run.returncode == 0, run.describe()
    for host in DEEPOPS:
        assert run.recap()[host]["changed"] >= 15, run.describe()
    assert warnings(run) == [], run.describe()


def test_second_converge_changes_nothing(reruns: dict[str, PlaybookRun]) -> None:
    """Idempotent on both nodes: the shared directory is written from both, and neither changes
    what the other did (one group id, one mode)."""
    run = reruns["again_deepops"]
    assert run.returncode == 0, run.describe()
    assert {h: run.recap()[h]["changed"] for h in DEEPOPS} == {"master": 0, "node": 0}, (
        run.changed_tasks()
    )
    assert warnings(run) == [], run.describe()


def group_id(env: Env, name: str) -> int:
    text = (env.targets[name].root / "etc/group").read_text()
    match = re.search(r"^dask-hpc:x:(\d+):", text, re.M)
    assert match, text
    return int(match.group(1))


def test_sw_is_the_shared_directory_on_both(converged: Env) -> None:
    """/sw/dask-hpc on both (the master's /sw is its own disk, exported; the node's a network
    mount of it), one directory seen from both, the group with one id: the master's first free
    system id (999 is its slurm group), not the node's (999 is free there)."""
    master, node = (converged.targets[n].root for n in DEEPOPS)
    assert converged.share.fs_type(node / "sw") == "fuse.sshfs"
    for root in (master, node):
        config = (root / "etc/dask/dask-hpc.yaml").read_text()
        assert re.search(r'^  scheduler-directory: "/sw/dask-hpc"$', config, re.M), config
    assert group_id(converged, "master") == group_id(converged, "node") == 998
    directory = (node / "sw/dask-hpc").stat()
    assert (directory.st_uid, directory.st_gid, directory.st_mode & 0o7777) == (0, 998, 0o3770)
    (master / "sw/dask-hpc/written-on-master").write_text("seen\n")
    try:
        assert (node / "sw/dask-hpc/written-on-master").read_text() == "seen\n"
    finally:
        (master / "sw/dask-hpc/written-on-master").unlink()


def test_start_cluster_on_each_node_uses_sw(converged: Env) -> None:
    """start-cluster with no flags plans its scheduler file in /sw/dask-hpc on either node."""
    for name in DEEPOPS:
        dry = run_on_node(converged.targets[name].root, "start-cluster cpu 1 --dry-run")
        assert dry.returncode == 0, dry.stderr
        plan = json.loads(dry.stdout)
        assert plan["scheduler_file"].startswith("/sw/dask-hpc/dask-hpc-"), plan


def test_deepops_example_across_the_two_nodes(converged: Env) -> None:
    """DeepOps' example command lines with the scheduler on the master and a worker on the node:
    the worker finds the cluster through the scheduler files in the shared /sw/dask-hpc. As root:
    through sshfs every file is created by its one login (root), so a user's 0600 credentials
    would not stay the user's; NFS keeps each caller's owner (two_nodes.SshfsShare)."""
    master, node = (converged.targets[n].root for n in DEEPOPS)
    deepops_example(master, node, "root", "/sw/dask-hpc")
