"""Helpers shared by the start-cluster tests (importable as ``support``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
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


def placeholder_scheduler_file(path: Path) -> Path:
    """A scheduler file as rank 0 writes it (the owner's, no TLS), naming no live scheduler:
    what ``--join ... --dry-run`` accepts."""
    from dask_hpc.guard.connection import SchedulerInfo, write_scheduler_file

    write_scheduler_file(path, SchedulerInfo("tcp://127.0.0.1:9", None, "nowhere", "none", None))
    return path


def printed_scheduler_file(stderr: str) -> Path:
    """The scheduler file the ready block names."""
    match = re.search(r"^  scheduler file  (\S+)$", stderr, re.MULTILINE)
    assert match, f"no scheduler file in the ready block:\n{stderr}"
    return Path(match.group(1))


def cluster_links(scheduler_file: Path, env: dict[str, str]) -> dict[str, str]:
    """``hpc-cluster links FILE``: the links with their tokens (left out of a non-terminal
    output), by name."""
    hpc_cluster = shutil.which("hpc-cluster")
    assert hpc_cluster, "hpc-cluster is not on PATH: run tests/setup/install.sh"
    res = subprocess.run(
        [hpc_cluster, "links", str(scheduler_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return dict(line.split(maxsplit=1) for line in res.stdout.splitlines())


def assert_tokens_left_out(stderr: str, links: dict[str, str]) -> None:
    """The ready block of a non-terminal output: each link without its token, and the hint."""
    from dask_hpc.guard.links import without_token

    for name, url in links.items():
        token = re.search(r"token=([\w-]+)", url)
        assert token is None or token.group(1) not in stderr, f"the {name} token was printed"
        assert re.search(rf"{name} +{re.escape(without_token(url))}\n", stderr), stderr
    assert "token=" not in stderr, stderr
    assert "hpc-cluster links" in stderr, stderr


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
