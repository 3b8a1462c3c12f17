"""Search paths handed on: empty, relative and shared entries dropped, in Python and in the job
script's shell alike (``guard.search_paths``, ``batch/templates/search_paths.sh``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dask_hpc.batch import clean_env
from dask_hpc.guard import search_paths

PROJECT_GID = 100  # Debian's `users`: a group other users are in


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """mine (0755), open (0777), open/inner (0755), sticky (1777)/mine (0755), group (0775, a
    project's group), rootgroup (0775, group 0: an image's tree made under umask 002)."""
    for name, mode in (("mine", 0o755), ("open", 0o777), ("open/inner", 0o755),
                       ("sticky", 0o1777), ("sticky/mine", 0o755), ("group", 0o775),
                       ("rootgroup", 0o775)):
        (tmp_path / name).mkdir()
        (tmp_path / name).chmod(mode)
    os.chown(tmp_path / "group", -1, PROJECT_GID)
    os.chown(tmp_path / "rootgroup", -1, 0)
    tmp_path.chmod(0o755)
    return tmp_path


def cases(tree: Path) -> dict[str, bool]:
    """entry -> kept?"""
    return {
        "": False,
        "relative/dir": False,
        str(tree / "mine"): True,
        str(tree / "open"): False,
        str(tree / "open" / "inner"): False,  # its parent: they could rename it
        str(tree / "sticky"): False,
        str(tree / "sticky" / "mine"): True,  # a sticky parent: only the owner renames it
        str(tree / "group"): False,  # a project's group: others, as OpenSSH's StrictModes
        str(tree / "rootgroup"): True,  # root's group: root's own
        str(tree / "mine" / "not-yet"): True,  # only the owner could make it
        str(tree / "open" / "not-yet"): False,  # anyone could make it
        "/usr/lib": True,
    }


def test_each_entry_is_kept_or_dropped_as_the_rules_say(tree: Path) -> None:
    for entry, kept in cases(tree).items():
        assert (search_paths.unsafe(entry) is None) == kept, (entry, search_paths.unsafe(entry))


def test_the_job_scripts_shell_drops_the_same_entries_as_python(tree: Path) -> None:
    """One rule, two places: the job script's shell runs before any Python."""
    entries = list(cases(tree))
    value = os.pathsep.join(entries)
    env = {name: value for name in search_paths.VARIABLES if name != "PATH"}
    env["PATH"] = os.pathsep.join(["/usr/bin", "/bin", *entries])
    show = "; ".join(f'echo "{n}=${{{n}-(unset)}}"' for n in search_paths.VARIABLES)
    shell = subprocess.run(
        ["/bin/bash", "-c", "\n".join(["set -euo pipefail", *clean_env.lines(), show])],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    from_shell = dict(line.split("=", 1) for line in shell.stdout.splitlines())
    python = dict(env)
    search_paths.clean(python)
    for name in search_paths.VARIABLES:
        assert from_shell[name] == python.get(name, "(unset)"), (name, shell.stderr)
    kept = [e for e, keep in cases(tree).items() if keep]
    assert from_shell["PYTHONPATH"] == os.pathsep.join(kept)
    # one line per variable, naming what was left out
    lines = shell.stderr.splitlines()
    assert len(lines) == len(search_paths.VARIABLES), lines
    assert all("left out an empty entry (the working directory)" in line for line in lines)


def test_only_unsafe_entries_leave_and_an_all_unsafe_variable_is_unset() -> None:
    env = {"PYTHONPATH": ":", "LD_LIBRARY_PATH": "/usr/lib", "NODE_PATH": "rel"}
    dropped, lines = search_paths.clean(env)
    assert env == {"LD_LIBRARY_PATH": "/usr/lib"}
    assert dropped == {"PYTHONPATH": ["", ""], "NODE_PATH": ["rel"]}
    assert [line.split(":")[0] for line in lines] == ["PYTHONPATH", "NODE_PATH"]
    assert "PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}DIR" in lines[0]  # the fix for `:$HOME/lib`


PROBE = """
import json, os, sys
from dask_hpc.guard import search_paths

PROJECT_GID = 100  # Debian's `users`: a group other users are in
try:
    said = search_paths.apply()
except search_paths.PlantedModules as error:
    said = ["refused: " + str(error)]
print(json.dumps({"said": said, "path": sys.path, "env": os.environ.get("PYTHONPATH")}))
"""


def test_apply_drops_the_entry_from_sys_path_and_refuses_what_was_loaded_from_it(
    tree: Path,
) -> None:
    """An empty PYTHONPATH entry puts the working directory before the standard library;
    apply() takes it off sys.path, and where a module already came from there (Python's own
    start imported it, before any code of ours) it refuses instead."""
    project = tree / "open"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["", str(tree / "mine")])}
    argv = [sys.executable, "-P", "-c", PROBE]
    out = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert str(project) not in seen["path"] and str(tree / "mine") in seen["path"], seen
    assert seen["env"] == str(tree / "mine")
    assert seen["said"][0].startswith("PYTHONPATH: left out an empty entry"), seen
    # a module of that directory already loaded: refused, naming it
    (project / "planted_early.py").write_text("")
    argv = [sys.executable, "-P", "-c", "import planted_early\n" + PROBE]
    out = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    said = json.loads(out.stdout)["said"]
    assert said[0].startswith("refused: module(s) planted_early were imported from"), said
