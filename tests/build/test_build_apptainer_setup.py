"""tests/setup/apptainer.sh: cached, idempotent, no host names; its namespaces leave nothing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from build_support import REPO, require_sidroot

SETUP = REPO / "tests" / "setup" / "apptainer.sh"
pytestmark = pytest.mark.apptainer


def test_setup_is_idempotent_and_uses_its_cache(run_cmd) -> None:
    """A second run rebuilds nothing and unpacks nothing: the root filesystem, its stamp and
    the tarball are the very same files after it (a condition, not a timing)."""
    cache = Path(os.environ.get("DASK_HPC_TEST_CACHE", "/var/tmp/dask-hpc-tests"))
    kept = [cache / "apptainer-sid", *cache.glob("apptainer-sid/.dask-hpc-rootfs-v*"),
            *cache.glob("apptainer-sid-v*.tar")]
    assert len(kept) == 3, f"no cached root filesystem in {cache}: run {SETUP} first"
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in kept]
    result = run_cmd(["bash", str(SETUP)], timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"apptainer version 1\.\d+", result.stdout)
    assert "debootstrap" not in result.stdout + result.stderr
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in kept] == before


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
