"""``hpc-job --output FILE`` writes a new file and renames it over FILE, never through a link.

Before: it wrote the path (following a symlink) and then chmod'ed it to 0755 by path: in a
shared directory the other user's ``job.sh -> ~owner/.bashrc`` had the owner overwrite their
own file with a job script and make it executable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.neighbour import Neighbour, shared_place

ARGS = ["--site", "aurora", "--nodes", "1", "--account", "proj", "--", "python", "job.py"]


def hpc_job(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-P", "-m", "dask_hpc.batch", *ARGS[:4], *args, *ARGS[4:]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_a_link_planted_at_the_output_is_not_written_through(
    neighbour: Neighbour, tmp_path: Path
) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("the owner's own file\n")
    victim.chmod(0o600)
    with shared_place(0o1777) as shared:
        planted = shared / "job.sh"
        neighbour.run(os.symlink, str(victim), str(planted))
        result = hpc_job("--output", str(planted))
        if os.geteuid() == 0:  # root may replace another user's entry in a sticky directory
            assert result.returncode == 0, result.stderr
            assert not planted.is_symlink() and planted.read_text().startswith("#!/bin/bash")
        else:  # the sticky bit keeps the link: refused in one line
            assert result.returncode == 2, result.stderr
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "belongs to another user" in lines[0], result.stderr
        assert "Traceback" not in result.stderr
        assert not list(shared.glob(".job.sh.*"))
    assert victim.read_text() == "the owner's own file\n"
    assert victim.stat().st_mode & 0o777 == 0o600


def test_the_owners_own_output_is_written_executable(tmp_path: Path) -> None:
    out = tmp_path / "job.sh"
    out.write_text("old\n")
    result = hpc_job("--output", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("#!/bin/bash") and out.stat().st_mode & 0o777 == 0o755
