"""``dask_hpc.guard.import_path``: how our Pythons start without the working directory on
``sys.path``, and ``private.changeable_by_others``, the rule it applies (a second user's
planted modules: tests/neighbour/test_import_path.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

from dask_hpc.guard import import_path
from dask_hpc.guard.private import changeable_by_others


def test_the_entrypoint_runs_the_same_bootstrap() -> None:
    text = (REPO / "entrypoints" / "start-cluster").read_text()
    assert f"-c '{import_path.BOOTSTRAP.format(module='dask_hpc')}'" in text


def test_this_python_gets_safe_path_and_another_the_bootstrap(tmp_path: Path) -> None:
    assert import_path.python_argv("m") == [sys.executable, "-P", "-m", "m"]
    other = str(tmp_path / "python3")
    argv = import_path.python_argv("m", other)
    assert argv[:2] == [other, "-c"] and 'run_module("m"' in argv[2]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Directories of ours (the test's user, root) under the private tmp_path."""
    for name, mode in (("open", 0o777), ("shared", 0o775), ("sticky", 0o1777), ("mine", 0o755)):
        (tmp_path / name).mkdir()
        os.chmod(tmp_path / name, mode)
    (tmp_path / "sticky" / "inside").mkdir(mode=0o755)
    (tmp_path / "open" / "inside").mkdir(mode=0o755)
    return tmp_path


def test_what_others_can_change(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert changeable_by_others(tree / "mine") is None
    assert "mode 0777" in changeable_by_others(tree / "open")
    assert "mode 0775" in changeable_by_others(tree / "shared")  # a group is others
    assert "mode 1777" in changeable_by_others(tree / "sticky")  # they can add files in it
    assert changeable_by_others(tree / "sticky" / "inside") is None  # but not rename ours
    problem = changeable_by_others(tree / "open" / "inside")  # they could rename it away
    assert "open can be written by other users (mode 0777) and is not sticky" in problem
    assert "no such file" in changeable_by_others(tree / "missing")
    # symbolic links are followed, and the target checked the same way
    (tree / "mine" / "to-open").symlink_to("../open")
    assert "mode 0777" in changeable_by_others(tree / "mine" / "to-open")
    (tree / "mine" / "to-mine").symlink_to(tree / "mine")
    assert changeable_by_others(tree / "mine" / "to-mine") is None
    assert "mode 0777" in changeable_by_others(tree / "mine" / "to-mine" / ".." / "open")
    (tree / "mine" / "loop").symlink_to("loop")
    assert "symbolic link" in changeable_by_others(tree / "mine" / "loop")
    monkeypatch.chdir(tree / "mine")
    assert changeable_by_others(".") is None
    assert "mode 0777" in changeable_by_others("../open")


PROBE = """
import json, os, sys
from dask_hpc.guard.import_path import settle
note = settle()
print(json.dumps({"note": note, "path": sys.path, "cwd": os.getcwd()}))
"""


def probe(argv: list[str], cwd: Path) -> dict:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("form", ["-c", "-P -c", "script"])
def test_settle_keeps_a_private_working_directory_last_and_drops_one_others_write(
    tree: Path, form: str
) -> None:
    script = tree / "mine" / "probe.py"
    script.write_text(PROBE)
    argv = {"-c": [sys.executable, "-c", PROBE], "-P -c": [sys.executable, "-P", "-c", PROBE],
            "script": [sys.executable, str(script)]}[form]
    for where, safe in ((tree / "mine", True), (tree / "open", False), (tree / "sticky", False)):
        seen = probe(argv, where)
        resolved = [os.path.realpath(p) if p else seen["cwd"] for p in seen["path"]]
        if safe:  # where Python put it (-c, a script), else appended
            assert seen["note"] == [] and str(where) in resolved, seen
            if form == "-P -c":
                assert seen["path"][-1] == str(where), seen
        else:
            assert str(where) not in resolved and "" not in seen["path"], seen
            assert f"the working directory {where} is not on the workers' module path" in (
                seen["note"][-1]
            )
    if form == "script":  # the script's own directory stays: it is the owner's (0755)
        assert str(tree / "mine") in probe(argv, tree / "open")["path"]


def test_pythonpath_entries_others_can_write_are_dropped_and_said(tree: Path) -> None:
    """A PYTHONPATH entry others can write is as dangerous as the working directory: left
    out of sys.path and of the environment handed on, in one line; the user's own stays."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "open"), str(tree / "mine")])}
    out = subprocess.run(
        [sys.executable, "-P", "-c", PROBE + "print(os.environ['PYTHONPATH'])"],
        cwd=tree / "mine", env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.splitlines()
    seen = json.loads(out[0])
    assert out[1] == str(tree / "mine")  # what this process hands on
    assert str(tree / "open") not in seen["path"] and str(tree / "mine") in seen["path"]
    assert len(seen["note"]) == 1 and "PYTHONPATH: left out" in seen["note"][0], seen
    assert "mode 0777" in seen["note"][0]


@pytest.mark.parametrize(
    ("listens", "link", "tunnel"),
    [
        ("127.0.0.1", "http://127.0.0.1:8787/status", "127.0.0.1"),
        ("", "http://127.0.0.1:8787/status", "127.0.0.1"),  # every interface: loopback's
        ("10.1.2.3", "http://10.1.2.3:8787/status", "10.1.2.3"),
        ("::1", "http://[::1]:8787/status", "[::1]"),
    ],
)
def test_the_dashboards_link_and_tunnel_name_the_address_it_listens_on(
    listens: str, link: str, tunnel: str
) -> None:
    """Never a name, never loopback's address for a dashboard that listens elsewhere: another
    user could hold that one."""
    from dask_hpc.guard.connection import SchedulerInfo
    from dask_hpc.running.banner import ssh_tunnel

    info = SchedulerInfo("tls://10.1.2.3:1", 8787, "node", "x", None, dashboard_host=listens)
    assert info.dashboard_link == link
    assert SchedulerInfo.from_json(info.to_json()).dashboard_link == link
    assert f"-L 127.0.0.1:8787:{tunnel}:8787 " in ssh_tunnel((), "node", [(8787, listens)])
