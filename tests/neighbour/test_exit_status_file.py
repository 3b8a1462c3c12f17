"""The exit-status file of Open MPI job scripts, in the job's shared working directory.

Before: the script named it ``$PWD/.dask-hpc-exit-status.$$`` and rank 0 wrote it with
``Path.write_text``: a symbolic link the other user planted there made the owner overwrite a
file of its own, a FIFO hung rank 0 at the end. Now the script makes it with ``mktemp`` and
rank 0 rewrites only a regular file of its own with one name.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from harness.mpi import openmpi
from harness.neighbour import Neighbour
from neighbour_support import QUIET
from support import start_cluster

from dask_hpc.batch.script import status_from_rank0


def plant_file(path: str, _: str) -> None:
    Path(path).write_text("")
    os.chmod(path, 0o666)


def plant_hard_link(path: str, _: str) -> None:
    own = Path(path).with_name("their-own")
    own.write_text("")
    os.chmod(own, 0o666)
    os.link(own, path)


PLANTS = {
    "a symbolic link to the owner's file": lambda path, target: os.symlink(target, path),
    "a FIFO": lambda path, _: os.mkfifo(path, 0o666),
    "the other user's file": plant_file,
    "a hard link to the other user's file": plant_hard_link,
}


@pytest.mark.parametrize("what", sorted(PLANTS))
def test_rank_0_never_writes_through_what_was_planted(
    what: str, run_cmd, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path,
    tmp_path: Path,
) -> None:
    owners_file = tmp_path / "results.csv"
    owners_file.write_text("the owner's results\n")
    status_file = sticky / ".dask-hpc-exit-status.4242"
    neighbour.run(PLANTS[what], str(status_file), str(owners_file))
    env = {**owner_env, "DASK_HPC__EXIT_STATUS_FILE": str(status_file)}
    result = run_cmd([*start_cluster(), "cpu", "1", *QUIET, "--", "true"], env=env, timeout=90)
    assert not result.timed_out, "rank 0 hung on the planted file"
    assert result.returncode == 0, result.stderr
    assert "not writing the exit status" in result.stderr and str(status_file) in result.stderr
    assert owners_file.read_text() == "the owner's results\n"
    if status_file.is_file() and not status_file.is_symlink():
        assert status_file.read_text() == "", "the owner wrote into the other user's file"


@pytest.mark.mpi
def test_the_job_scripts_status_file_under_real_open_mpi(
    run_cmd, owner_env: dict[str, str], sticky: Path
) -> None:
    """The lines ``invoke job`` writes for Open MPI (whose mpirun exits 0 whatever the ranks'
    statuses), run for real in a shared working directory: COMMAND's status comes back, and
    the file is gone."""
    command = [sys.executable, "-c", "raise SystemExit(3)"]
    mpirun = openmpi(1, extra=["--enable-recovery"])  # as systems.yaml's line: mpirun exits 0
    launch = shlex.join([*mpirun, *start_cluster(), "cpu", "1", *QUIET, "--", *command])
    script = "set -euo pipefail\n" + status_from_rank0(launch) + "\n"
    result = run_cmd(["bash", "-c", script], env=owner_env, cwd=sticky, timeout=120)
    assert result.returncode == 3, result.stderr
    assert not [p for p in sticky.iterdir() if p.name.startswith(".dask-hpc-exit-status")]
