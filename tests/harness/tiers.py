"""How the suite is split: pytest-xdist groups, and the quick tier.

Groups: under ``-n N --dist loadgroup``, tests that share a costly fixture run in one worker,
together: a module-scoped one (one worker per file) or one of ``SHARED_SESSION`` (made once per
worker otherwise); so do the files of ``WAITING``, whose tests mostly wait on timeouts. The
rest spread.

The quick tier: ``tests/slow_tests.py`` names the tests that take over a minute, with the
reason, and the session fixtures that take minutes (every test that uses one is slow); they,
and the tests of tests/heavy_tests.json (over its threshold of CPU seconds in a whole run),
are marked ``slow``. It also names the tests run under every launcher: each one's cases after
the first are marked ``matrix``. ``python3 -m pytest -m "not slow and not matrix"`` leaves
both out. docs/install.md shows the same lists (checked by ``tests/test_collection.py``). At
the end of a run, a test that took over a minute and is not marked is named, so the list
follows the suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slow_tests import (
    HEAVY,
    LAUNCHER_MATRIX,
    SLOW,
    SLOW_FIXTURES,
    SLOW_SECONDS,
    WAITING,
    WAITING_GROUP,
)

from harness.cpu_account import split_group

# Session fixtures too costly to make once per pytest-xdist worker (the converged Ansible
# targets, the built image), by (directory under tests/, fixture name): their group's name.
SHARED_SESSION = {("ansible", "env"): "ansible targets", ("build", "local_image"): "local image"}
# The test ids of a run over the whole suite (testpaths, no paths given), as collected (before
# -m, -k and xdist's group suffixes): tests/test_collection.py reads them rather than
# collecting the suite again in a process of its own (7 s of CPU).
COLLECTED = pytest.StashKey[list[str]]()


def fixture_keys(item: pytest.Item) -> list[tuple[tuple[str, ...], str]]:
    """(scope, (directory under tests/, fixture name)) of each fixture ``item`` uses."""
    keys = []
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        fixture = defs[-1]
        where = Path(fixture.baseid.split("::")[0]).parts[1:2]  # tests/<dir>/...
        keys.append((fixture.scope, (*where, name)))
    return keys


def group_of(item: pytest.Item) -> str | None:
    if item.nodeid.split("::")[0] in WAITING:
        return WAITING_GROUP
    group = None
    for scope, key in fixture_keys(item):
        if scope == "session" and key in SHARED_SESSION:
            return SHARED_SESSION[key]
        if scope in ("module", "package", "class"):
            group = item.nodeid.split("::")[0]
    return group


def is_slow(item: pytest.Item) -> bool:
    return (
        item.nodeid.split("[", 1)[0] in SLOW
        or item.nodeid in HEAVY
        or any(key in SLOW_FIXTURES for _, key in fixture_keys(item))
    )


def matrix_repeats(test_ids: list[str]) -> set[str]:
    """Of the tests on LAUNCHER_MATRIX, every case but the first (in ``test_ids``' order)."""
    first_cases: set[str] = set()
    repeats = set()
    for test_id in test_ids:
        base = test_id.split("[", 1)[0]
        if base in LAUNCHER_MATRIX:
            if base in first_cases:
                repeats.add(test_id)
            first_cases.add(base)
    return repeats


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        config.stash[COLLECTED] = [item.nodeid for item in items]
    repeats = matrix_repeats([item.nodeid for item in items])
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
        if item.nodeid in repeats:
            item.add_marker(pytest.mark.matrix)
        if not item.get_closest_marker("xdist_group") and (group := group_of(item)):
            item.add_marker(pytest.mark.xdist_group(group))


_took: dict[str, float] = {}  # setup, call and teardown of each test, in seconds
_slow: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _took[report.nodeid] = _took.get(report.nodeid, 0.0) + report.duration
    if "slow" in report.keywords:
        _slow.add(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    groups: dict[str, float] = {}
    for nodeid, seconds in _took.items():
        group = split_group(nodeid)[1]
        if group is not None:
            groups[group] = groups.get(group, 0.0) + seconds
    if groups:
        terminalreporter.section("time in each group (one worker each: the longest bounds the run)")
        for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:6.0f} s  {group}")
    unmarked = {k: t for k, t in _took.items() if t > SLOW_SECONDS and k not in _slow}
    if unmarked:
        terminalreporter.section("over a minute, not marked slow (tests/slow_tests.py)")
        for nodeid, seconds in sorted(unmarked.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:6.0f} s  {nodeid}")
