"""Helpers of the second-user suite (importable as ``neighbour_support``)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from harness.mpi import mpich
from harness.procs import CmdResult

TESTS = Path(__file__).resolve().parents[1]
NEIGHBOUR_PROBE = TESTS / "jobs" / "neighbour_probe.py"
LAUNCHERS = ("local", "mpich", "srun")
QUIET = ["--dashboard-address", "127.0.0.1:0", "--timeout", "90"]


def launch(name: str, slurm_cluster: object | None) -> list[str]:
    """The launcher in front of start-cluster: 2 ranks on 2 (emulated) nodes, or none."""
    if name == "local":
        return []
    if name == "mpich":
        return mpich(2, hosts=["nodeA", "nodeB"], ppn=1)
    return ["srun", "-N", "2", "--ntasks-per-node", "1", "--kill-on-bad-exit=1"]


def probe_command() -> list[str]:
    return ["--", sys.executable, str(NEIGHBOUR_PROBE)]


def neighbour_result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("NEIGHBOUR "):
            return json.loads(line[len("NEIGHBOUR ") :])
    raise AssertionError(f"no NEIGHBOUR line in:\n{stdout}")


def one_error_line(result: CmdResult, *fragments: str) -> str:
    """The run was refused: exit status 2, rank 0's line naming ``fragments``, no traceback."""
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [x for x in result.stderr.splitlines() if x.startswith("start-cluster: error: ")]
    assert errors, result.stderr
    assert len(set(errors)) == 1, result.stderr  # every rank that says it, says the same
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert not re.search(r"Dask cluster ready", result.stderr), result.stderr
    return errors[0]
