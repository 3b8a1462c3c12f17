"""tests/setup/apptainer.sh: cached, idempotent, no host names; its namespaces leave nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from build_support import REPO, require_sidroot

SETUP = REPO / "tests" / "setup" / "apptainer.sh"
pytestmark = pytest.mark.apptainer


def test_setup_is_fast_and_idempotent_when_cached(run_cmd) -> None:
    result = run_cmd(["bash", str(SETUP)], timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"apptainer version 1\.\d+", result.stdout)
    assert result.seconds < 15, f"cached setup took {result.seconds:.1f} s"


def test_setup_names_no_package_archive() -> None:
    text = SETUP.read_text()
    assert not re.search(r"https?://", text), "the mirror must come from the host's apt sources"


def test_root_filesystem_sees_host_tmp_and_has_mpich(run_cmd, tmp_path: Path) -> None:
    (tmp_path / "marker").write_text("here\n")
    result = run_cmd(
        [
            require_sidroot(),
            "sh",
            "-c",
            f"cat {tmp_path}/marker; mpiexec --version | head -1; echo $$",
        ],
        timeout=30,
    )
    lines = result.check().stdout.splitlines()
    assert lines[0] == "here"
    assert "HYDRA" in lines[1] or "mpich" in lines[1].lower()
    assert lines[2] == "1"  # the command is PID 1 of its own PID namespace


def test_killing_sidroot_ends_everything_inside(run_cmd) -> None:
    """A timed-out command's whole namespace goes (the harness then checks nothing is left)."""
    result = run_cmd([require_sidroot(), "sh", "-c", "sleep 300 & sleep 300 & wait"], timeout=2)
    assert result.timed_out
