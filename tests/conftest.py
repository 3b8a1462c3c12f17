"""Shared fixtures: the harness plugin (tagged processes, leak checks, Slurm) and start-cluster."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["harness.plugin"]

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROBE = TESTS / "jobs" / "probe.py"


def start_cluster() -> list[str]:
    """The installed console script; fails loudly when the package is not installed."""
    path = shutil.which("start-cluster")
    assert path, "start-cluster is not on PATH: run tests/setup/install.sh"
    return [path]


@pytest.fixture
def cluster_env(tagged_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A tagged environment whose job-scoped scheduler directories live under ``tmp_path``."""
    env = dict(tagged_env)
    env["DASK_HPC__SCHEDULER_DIRECTORY"] = str(tmp_path / "shared")
    env["DASK_HPC__TIMEOUT"] = "60"
    env["PYTHONUNBUFFERED"] = "1"
    for var in [v for v in env if v.startswith(("SLURM_", "OMPI_COMM", "PMI_", "PALS_", "JSM_"))]:
        del env[var]
    return env


def probe_result(stdout: str) -> dict[str, Any]:
    """The JSON line that tests/jobs/probe.py prints."""
    for line in stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[len("PROBE ") :])
    raise AssertionError(f"no PROBE line in output:\n{stdout}")


def probe(*args: str) -> list[str]:
    return [sys.executable, str(PROBE), *args]
