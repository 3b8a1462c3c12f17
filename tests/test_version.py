"""The version comes from the git tag, in one place, and everything shows the same one."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from support import REPO, start_cluster

import dask_hpc

GIT = ["git", "-c", "user.name=dask-hpc tests", "-c", "user.email=tests@dask-hpc.invalid"]


def test_start_cluster_version_is_the_packages(run_cmd, cluster_env) -> None:
    result = run_cmd([*start_cluster(), "--version"], env=cluster_env, timeout=30).check()
    assert result.stdout.strip() == f"dask-hpc {dask_hpc.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", dask_hpc.__version__), dask_hpc.__version__


def _source_tree(dest: Path) -> Path:
    """What a build reads: pyproject.toml, the package, the README (its long description)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    skip = shutil.ignore_patterns("__pycache__", "_version.py", "*.egg-info")  # build outputs
    shutil.copytree(REPO / "src", dest / "src", ignore=skip)
    return dest


def _scm_version(tree: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "setuptools_scm", "-c", str(tree / "pyproject.toml")],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_a_build_from_a_tag_carries_the_tags_version(tmp_path: Path) -> None:
    """A tagged tree builds a wheel of that version whose start-cluster --version says it; a
    commit after the tag is the next dev release; a tree without git gets the fallback."""
    tree = _source_tree(tmp_path / "src-tree")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run([*GIT, "-C", str(tree), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(tree), "commit", "-q", "-m", "release"], check=True)
    subprocess.run([*GIT, "-C", str(tree), "tag", "-a", "v9.8.7", "-m", "9.8.7"], check=True)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(tree)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name == "dask_hpc-9.8.7-py3-none-any.whl"
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    shown = subprocess.run(
        [sys.executable, "-m", "dask_hpc", "--version"],
        env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "dask-hpc 9.8.7"

    subprocess.run([*GIT, "-C", str(tree), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    assert _scm_version(tree) == "9.8.8.dev1"
    shutil.rmtree(tree / ".git")
    assert _scm_version(tree) == "0.0.0"  # pyproject.toml's fallback_version


def test_the_fallback_is_the_packages_own() -> None:
    """A tree never built (no _version.py) says the same fallback as pyproject.toml."""
    source = (REPO / "src" / "dask_hpc" / "__init__.py").read_text()
    pyproject = (REPO / "pyproject.toml").read_text()
    fallback = re.search(r'^fallback_version = "([^"]+)"', pyproject, re.M)
    assert fallback and f'__version__ = "{fallback.group(1)}"' in source
