"""Fixtures of the second-user suite: the other user, shared places, the owner's launches.

The owner is the test (root); the attacker a second, unprivileged user (harness.neighbour).
Each launcher runs the same cluster: local mode, MPICH on two emulated hosts, and srun on the
session's two Slurm nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness.neighbour import Neighbour, account, shared_place
from harness.procs import CmdResult
from neighbour_support import LAUNCHERS, QUIET, launch
from support import start_cluster


@pytest.fixture
def neighbour() -> Neighbour:
    """The other user of the node."""
    return Neighbour(account())


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A shared sticky directory (as /tmp, /local/scratch)."""
    with shared_place(0o1777) as path:
        yield path


@pytest.fixture
def project() -> Iterator[Path]:
    """A shared directory that is not sticky (a group-writable project directory)."""
    with shared_place(0o777) as path:
        yield path


@pytest.fixture
def owner_env(cluster_env: dict[str, str], sticky: Path) -> dict[str, str]:
    """The owner's environment: its temporary directory is the shared sticky one."""
    return {**cluster_env, "TMPDIR": str(sticky)}


@pytest.fixture(params=LAUNCHERS)
def launcher(request: pytest.FixtureRequest) -> str:
    if request.param == "srun":
        request.getfixturevalue("slurm_cluster")
    return str(request.param)


@pytest.fixture
def run_owner(
    launcher: str, request: pytest.FixtureRequest, run_cmd: Callable[..., CmdResult]
) -> Callable[..., CmdResult]:
    """``run_owner(args, env)``: ``start-cluster cpu 1 ARGS`` under this test's launcher."""
    slurm = request.getfixturevalue("slurm_cluster") if launcher == "srun" else None

    def run(args: list[str], env: dict[str, str], timeout: float = 150) -> CmdResult:
        full = {**env, **(slurm.env if slurm else {})}
        argv = [*launch(launcher, slurm), *start_cluster(), "cpu", "1", *QUIET, *args]
        return run_cmd(argv, env=full, timeout=timeout)

    return run
