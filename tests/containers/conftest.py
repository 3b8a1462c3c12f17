"""Fixtures of the container runtime tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user reaches (0755, under /tmp; pytest's own are root's alone), for a
    second user's job: its image, its directory."""
    path = Path(tempfile.mkdtemp(prefix="dask-hpc-shared-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)
