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
        # -n 0: collected once, not again in each of xdist's 4 workers (45 s in the whole run)
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-n", "0"],  # fmt: skip
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


def test_the_slow_list_names_real_tests_and_docs_show_it() -> None:
    """Each test on tests/slow_tests.py exists, and docs/install.md lists each with the
    session fixtures that make their tests slow."""
    from slow_tests import SLOW, SLOW_FIXTURES

    docs = (REPO / "docs" / "install.md").read_text()
    for test_id in SLOW:
        path, name = test_id.split("::")
        assert f"def {name}(" in (REPO / path).read_text(), f"no test {test_id}"
        assert f"`{name}`" in docs, f"docs/install.md does not list {test_id}"
    for where, fixture in SLOW_FIXTURES:
        assert f"`{fixture}` (tests/{where}/)" in docs, f"docs/install.md: {where}/{fixture}"
