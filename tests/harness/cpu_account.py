"""Where the suite's CPU goes: each test's CPU seconds, for finding what to make cheaper.

On a 2-core machine running 4 pytest-xdist workers, a test's wall time says little (it waits
for the CPU others hold); its CPU time is what the run pays. With ``DASK_HPC_TEST_CPU_LOG=FILE``
each worker moves itself into a cgroup (v1 cpuacct) of its own, which the processes it starts
inherit (clusters, launchers, Flux brokers, builds), and appends one JSON line per test to FILE:
``{"test", "worker", "wall", "cpu"}``. Off by default; needs root and cgroup v1's cpuacct.
Processes started by a daemon another worker started (a Slurm job's ranks) count to that worker.
``python3 tests/harness/cpu_account.py FILE`` prints the tests and files that cost most;
``... FILE --heavy SECONDS "WHEN, at COMMIT, HOW"`` writes tests/heavy_tests.json, the tests
over SECONDS of CPU, which the quick tier leaves out (``harness.tiers``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

LOG_VAR = "DASK_HPC_TEST_CPU_LOG"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _own_group() -> Path | None:
    """This worker's cgroup, with this process in it; None when accounting is off."""
    if not os.environ.get(LOG_VAR):
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    for old in CPUACCT.glob("dask-hpc-tests-*/*/"):  # a worker's, whose last process was late
        for empty in (old, old.parent):
            try:
                empty.rmdir()
            except OSError:  # still in use
                pass
    group = CPUACCT / f"dask-hpc-tests-{os.getppid()}" / worker
    group.mkdir(parents=True, exist_ok=True)
    (group / "tasks").write_text(str(os.getpid()))
    return group


def _leave(group: Path) -> None:
    """Back to the root group, and this worker's group removed (its parent by the last)."""
    (CPUACCT / "tasks").write_text(str(os.getpid()))
    for empty in (group, group.parent):
        try:
            empty.rmdir()
        except OSError:  # still in use: another worker's, or a process left behind
            pass


_GROUP = _own_group()


def _usage() -> float:
    assert _GROUP is not None
    return int((_GROUP / "cpuacct.usage").read_text()) / 1e9


def pytest_unconfigure() -> None:
    if _GROUP is not None:
        _leave(_GROUP)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if _GROUP is None:
        yield
        return
    wall, cpu = time.monotonic(), _usage()
    yield
    line = {
        "test": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "wall": round(time.monotonic() - wall, 3),
        "cpu": round(_usage() - cpu, 3),
    }
    with open(os.environ[LOG_VAR], "a") as log:
        log.write(json.dumps(line) + "\n")


def split_group(nodeid: str) -> tuple[str, str | None]:
    """A reported test id as collected, and its pytest-xdist loadgroup (``id@group``;
    parameters may hold an ``@`` too, but then the id ends in ``]``)."""
    if "@" in nodeid and not nodeid.endswith("]"):
        test, group = nodeid.rsplit("@", 1)
        return test, group
    return nodeid, None


def write_heavy(log: Path, threshold: float, measured: str) -> None:
    """tests/heavy_tests.json from a log: each test that took over ``threshold`` CPU seconds
    (``harness.tiers`` leaves them out of the quick tier)."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line]
    most: dict[str, float] = {}  # a test in the log twice (two runs appended): its larger
    for row in rows:
        test = split_group(row["test"])[0]
        most[test] = max(most.get(test, 0.0), row["cpu"])
    tests = {test: cpu for test, cpu in sorted(most.items()) if cpu > threshold}
    document = {"measured": measured, "threshold_cpu_s": threshold, "tests": tests}
    from slow_tests import HEAVY_FILE

    HEAVY_FILE.write_text(json.dumps(document, indent=1) + "\n")


def report(path: Path, top: int = 40) -> None:
    """The tests and the files that took the most CPU, and the total."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    by_file: dict[str, float] = defaultdict(float)
    for row in rows:
        by_file[row["test"].split("::")[0]] += row["cpu"]
    total = sum(r["cpu"] for r in rows)
    print(f"{len(rows)} tests, {total:.0f} CPU s in all")
    print(f"\n{'cpu s':>8} {'wall s':>8}  test")
    for row in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        print(f"{row['cpu']:8.1f} {row['wall']:8.1f}  {row['test']}")
    print(f"\n{'cpu s':>8}  file")
    for name, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{cpu:8.1f}  {name}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: slow_tests
    if len(sys.argv) == 5 and sys.argv[2] == "--heavy":
        # FILE --heavy SECONDS "YYYY-MM-DD, at COMMIT, how": write tests/heavy_tests.json
        write_heavy(Path(sys.argv[1]), float(sys.argv[3]), sys.argv[4])
    else:
        report(Path(sys.argv[1]))
