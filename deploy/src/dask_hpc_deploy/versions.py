"""The versions an image is built with: dask-hpc's own (from git) and the exact Dask pins."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from dask_hpc.errors import UsageError

from .targets import REPO

# The exact releases the images and the test environment install (pyproject.toml declares the
# range dask-hpc works with; spack/common.yaml must pin the same, tests/spack checks it).
CONSTRAINTS = "constraints.txt"


def source_version(repo: Path = REPO) -> str:
    """dask-hpc's version as setuptools-scm derives it from ``repo``'s git tags.

    The same settings as the package's own build ([tool.setuptools_scm] in pyproject.toml),
    so an image's labels and the dask-hpc inside it say the same.
    """
    config = repo / "pyproject.toml"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "setuptools_scm", "-c", str(config)],
            capture_output=True,
            text=True,
            cwd=repo,
        )
    except OSError as error:
        raise UsageError(f"cannot run setuptools-scm: {error}", "pip install -e ./deploy") from None
    version = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    if not version:
        problem = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(
            f"cannot read dask-hpc's version from {repo}: {problem}",
            "pip install -e ./deploy (it brings setuptools-scm)",
        )
    return version[0]


def pins(repo: Path = REPO) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of ``constraints.txt``."""
    found = {}
    for line in (repo / CONSTRAINTS).read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", line)
        if m:
            found[m.group(1).lower().replace("_", "-")] = m.group(2)
    return found


def pinned_version(dist: str, repo: Path = REPO) -> str:
    """The exact version the images install of ``dist``, else ``any``."""
    return pins(repo).get(dist, "any")
