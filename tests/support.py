"""Helpers shared by the start-cluster tests (importable as ``support``)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROBE = TESTS / "jobs" / "probe.py"


def start_cluster() -> list[str]:
    """The installed console script; fails loudly when the package is not installed."""
    path = shutil.which("start-cluster")
    assert path, "start-cluster is not on PATH: run tests/setup/install.sh"
    return [path]


def probe_result(stdout: str) -> dict[str, Any]:
    """The JSON line that tests/jobs/probe.py prints."""
    for line in stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[len("PROBE ") :])
    raise AssertionError(f"no PROBE line in output:\n{stdout}")


def probe(*args: str) -> list[str]:
    return [sys.executable, str(PROBE), *args]
