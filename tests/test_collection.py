"""Every test file in the repository is collected by the README's test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_test_file_is_collected() -> None:
    """`python3 -m pytest` from the repository root collects every tests/**/test_*.py.

    pytest's default ``norecursedirs`` silently skips directories such as ``build``: a test
    directory that is never collected never fails, so this test does.
    """
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected = {line.split("::", 1)[0] for line in result.stdout.splitlines() if "::" in line}
    files = {
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if "__pycache__" not in path.parts
    }
    missing = sorted(files - collected)
    assert files and not missing, f"never collected by `python3 -m pytest`: {missing}"
    dirs = {str(Path(f).parent) for f in files}
    assert {"tests", "tests/build", "tests/ansible", "tests/spack", "tests/elastic"} <= dirs
