"""Helpers shared by the start-cluster tests (importable as ``support``)."""

from __future__ import annotations

import json
import re
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


# Before distributed 2026.7.0 a connection that a server accepted just as it stopped listening
# logged this traceback (TCPListener._handle_stream; fixed upstream in 2026.7.0 by closing such a
# stream). Dask's own clusters print it too: on older Dask it is Dask's noise, not ours.
_UPSTREAM_LISTENER_RACE = re.compile(
    r"[^\n]*Exception in callback[^\n]*\n"
    r"Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n)*?"
    r"ValueError: invalid operation on non-started TCPListener\n?"
)


def without_upstream_noise(stderr: str) -> str:
    """STDERR less the tracebacks of Dask races fixed upstream after the installed release."""
    import distributed
    from packaging.version import Version

    if Version(distributed.__version__) < Version("2026.7.0"):
        return _UPSTREAM_LISTENER_RACE.sub("", stderr)
    return stderr
