"""Every test file in the repository is collected by the README's test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def collect() -> list[str]:
    """The test ids `python3 -m pytest` collects, in order."""
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
    return [line for line in result.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def every_test(request: pytest.FixtureRequest) -> list[str]:
    """The whole run's test ids: as this run collected them when it is a run of the whole
    suite (``harness.tiers``), otherwise collected once for this file's tests."""
    from harness.tiers import COLLECTED

    return request.config.stash.get(COLLECTED, None) or collect()


def test_every_test_file_is_collected(every_test: list[str]) -> None:
    """`python3 -m pytest` from the repository root collects every tests/**/test_*.py.

    pytest's default ``norecursedirs`` silently skips directories such as ``build``: a test
    directory that is never collected never fails, so this test does.
    """
    collected = {test_id.split("::", 1)[0] for test_id in every_test}
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


def test_the_launcher_matrix_names_parametrized_tests_and_the_quick_tier_keeps_one_case(
    every_test: list[str],
) -> None:
    """Each test on LAUNCHER_MATRIX exists and has several cases, of which the quick tier keeps
    the first (the others are marked ``matrix``); docs/install.md names it."""
    from harness.tiers import matrix_repeats
    from slow_tests import LAUNCHER_MATRIX

    docs = (REPO / "docs" / "install.md").read_text()
    repeats = matrix_repeats(every_test)
    for test_id in LAUNCHER_MATRIX:
        cases = [t for t in every_test if t.split("[", 1)[0] == test_id]
        assert len(cases) > 1, f"{test_id}: {len(cases)} case(s), not a launcher matrix"
        assert [t for t in cases if t not in repeats] == cases[:1], test_id
        assert f"`{test_id.split('::')[1]}`" in docs, f"docs/install.md does not list {test_id}"


def test_the_heavy_list_names_tests_the_suite_collects(every_test: list[str]) -> None:
    """tests/heavy_tests.json (what the quick tier leaves out for its CPU) names collected
    tests: a test renamed or removed since it was written fails here, not silently."""
    from slow_tests import HEAVY

    gone = sorted(set(HEAVY) - set(every_test))
    assert not gone, (
        f"tests/heavy_tests.json names tests not collected: {gone}; write it again from a "
        "whole run's DASK_HPC_TEST_CPU_LOG (tests/harness/cpu_account.py)"
    )
