"""The role's decisions made on the controller (filter_plugins/), tested as Python: which shared
directory each node takes, the group id every node gets, and the integer checks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "ansible/roles/dask_hpc/filter_plugins"
CANDIDATES = ["/sw", "/shared", "/home"]


def plugin(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, PLUGINS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shared = plugin("dask_hpc_shared")
checks = plugin("dask_hpc_checks")


def look(fs: str = "ext2/ext3", exists: bool = True, exported: str | None = None,
         gid: int | None = None, at: str = "/") -> dict[str, Any]:  # fmt: skip
    return {"exists": exists, "at": at, "fs": fs, "exported": exported, "gid": gid}


def probe(
    paths: dict[str, dict[str, Any]],
    group_gid: int | None = None,
    gids: tuple[int, ...] = (0, 100, 999),
    mounts: tuple[str, ...] = (),
) -> dict[str, Any]:
    absent = look(exists=False)
    every = {p: absent for c in CANDIDATES for p in (c, f"{c}/dask-hpc")}
    return {"paths": {**every, **paths}, "exports": [], "network_mounts": list(mounts),
            "group_gid": group_gid, "gids": list(gids)}  # fmt: skip


# A stock DeepOps cluster: the master exports /sw from its disk, the node mounts it over NFS.
MASTER = probe({"/sw": look(exported="/sw")})
NODE = probe({"/sw": look("nfs")})


def decide(probes: dict[str, Any], host: str, explicit: str = "", size: int = 2,
           check: bool = True) -> dict[str, Any]:  # fmt: skip
    return shared.shared_dir(probes, host, explicit, CANDIDATES, "dask-hpc", size, check)


def test_deepops_layout_finds_sw_on_the_server_and_the_client() -> None:
    probes = {"master": MASTER, "node": NODE}
    assert decide(probes, "master") == {"path": "/sw/dask-hpc", "problems": []}
    assert decide(probes, "node") == {"path": "/sw/dask-hpc", "problems": []}


def test_first_shared_candidate_wins_then_network_mounts() -> None:
    lustre = probe({"/lus": look("lustre"), "/home": look("nfs")}, mounts=("/lus",))
    assert decide({"a": lustre}, "a")["path"] == "/home/dask-hpc"
    lustre_only = probe({"/lus": look("lustre")}, mounts=("/lus",))
    assert decide({"a": lustre_only}, "a")["path"] == "/lus/dask-hpc"


def test_nothing_shared_on_a_cluster_is_one_line_naming_the_node() -> None:
    result = decide({"a": probe({}), "b": NODE}, "a")
    assert result["path"] == "/sw/dask-hpc"
    (problem,) = result["problems"]
    assert problem.startswith("a shares none of /sw, /shared, /home over a network file system")
    assert "or set dask_hpc_shared_dir" in problem


def test_one_node_needs_nothing_shared() -> None:
    assert decide({"a": probe({})}, "a", size=1) == {"path": "/sw/dask-hpc", "problems": []}
    assert decide({"a": probe({})}, "a", check=False)["problems"] == []


def test_nodes_that_find_different_directories_are_refused() -> None:
    other = probe({"/shared": look("nfs")})
    (problem,) = decide({"a": NODE, "b": other}, "a")["problems"]
    assert problem.startswith("The nodes found different shared directories (a: /sw/dask-hpc, "
                              "b: /shared/dask-hpc)")  # fmt: skip


def test_named_directory_on_a_local_disk_is_refused_unless_exported() -> None:
    local = probe({"/data/dask": look(exists=False, at="/data")})
    (problem,) = decide({"a": local}, "a", explicit="/data/dask")["problems"]
    assert "is on a local file system (ext2/ext3 at /data) of a, but the cluster has 2" in problem
    served = probe({"/data/dask": look(exists=False, at="/data", exported="/data")})
    assert decide({"a": served}, "a", explicit="/data/dask")["problems"] == []


def gid(probes: dict[str, Any], host: str) -> dict[str, Any]:
    paths = {h: "/sw/dask-hpc" for h in probes}
    return shared.group_gid(probes, host, paths, "dask-hpc")


def test_group_id_is_the_highest_free_on_every_node() -> None:
    master = probe({}, gids=(0, 100, 999))  # the master's slurm group took 999
    node = probe({}, gids=(0, 100))
    assert gid({"master": master, "node": node}, "node") == {"gid": 998, "problems": []}


def test_group_id_follows_an_existing_group_or_the_directory() -> None:
    have = probe({}, group_gid=990, gids=(990,))
    new = probe({})
    assert gid({"a": have, "b": new}, "b") == {"gid": 990, "problems": []}
    on_disk = probe({"/sw/dask-hpc": look("nfs", gid=977)})
    assert gid({"a": on_disk}, "a") == {"gid": 977, "problems": []}


def test_group_ids_that_differ_or_clash_are_refused() -> None:
    a, b = probe({}, group_gid=990, gids=(990,)), probe({}, group_gid=991, gids=(991,))
    (problem,) = gid({"a": a, "b": b}, "a")["problems"]
    assert problem.startswith("Group dask-hpc has different ids on the nodes (a: 990, b: 991)")
    taken = probe({}, gids=(990,))  # another group has 990 there
    (problem,) = gid({"a": a, "b": taken}, "b")["problems"]
    assert problem.startswith("Group dask-hpc needs id 990 on b")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"dask_hpc_deepops_port": "0"}, ["dask_hpc_deepops_port 0 is not a port: use 1-65535."]),
        ({"dask_hpc_deepops_port": 8786}, []),
        (
            {"dask_hpc_nofile": "900000", "dask_hpc_nofile_hard": "1048576"},
            [],  # as text, "900000" > "1048576": compared as numbers here
        ),
        (
            {"dask_hpc_nofile": 2000000, "dask_hpc_nofile_hard": "1048576"},
            ["dask_hpc_nofile_hard (1048576) is below dask_hpc_nofile (2000000): raise "
             "dask_hpc_nofile_hard or lower dask_hpc_nofile."],
        ),  # fmt: skip
        ({"dask_hpc_group_gid": None}, []),
    ],
)
def test_numbers_are_compared_as_numbers(values: dict[str, Any], expected: list[str]) -> None:
    assert checks.number_problems(values) == expected
