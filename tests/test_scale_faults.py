"""python -m benchmarks.scale.faults (docs/reliability.md, Faults at scale) at a small size, in
CI."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = [sys.executable, "-m", "benchmarks.scale.faults"]  # run from REPO


def table_rows(stdout: str) -> tuple[dict[str, list[str]], list[list[str]]]:
    """The first table's rows by label, and the goals table's rows."""
    rows: dict[str, list[str]] = {}
    goals: list[list[str]] = []
    for line in stdout.splitlines():
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1] in ("kill", "stuck", "hang"):
            goals.append(cells)
        else:
            rows.setdefault(cells[0], cells[1:])
    return rows, goals


@pytest.mark.timeout(900)  # three scenarios: ~90 s here (the hang waits hpc.hung-timeout, 30 s)
def test_the_scale_faults_benchmark_runs_and_prints_its_table(run_cmd, cluster_env) -> None:
    """20 workers on 20 ranks: 2 ranks SIGKILLed mid-computation, then (a run of its own) 1
    rank SIGSTOPped before the roll call, then 1 rank SIGSTOPped mid-computation. The lost
    workers, and only they, are removed: by their broken connections, and the hung one by
    start-cluster's hung-rank check, which woken it survives not; every task's result is
    right; nobody healthy is dropped. The timings are printed against the goals, not asserted
    (benchmarks, not timed tests)."""
    argv = [*BENCH, "--workers", "20", "--tasks-per-worker", "5",
            "--task-seconds", "0.5", "--stall", "1", "--timeout", "240"]  # fmt: skip
    result = run_cmd(argv, env=cluster_env, timeout=860, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    rows, goals = table_rows(result.stdout)
    assert rows[""][0].startswith("2 ranks killed (SIGKILL of 1 processes)"), rows[""]
    assert rows[""][1].startswith("1 rank(s) stopped (SIGSTOP) at launch"), rows[""]
    assert rows[""][2].startswith("1 ranks hung (SIGSTOP of 1 processes)"), rows[""]
    assert rows["lost workers removed"] == ["2/2", "–", "1/1"]
    assert rows["why the scheduler removed them"] == [
        "handle-worker-cleanup: 2", "–", "dask-hpc-hung-rank: 1"]  # fmt: skip
    assert rows["healthy workers removed before COMMAND's end"] == ["0", "0", "0"]
    assert rows["workers at the end / expected"] == ["18/18", "20/20", "19/19"]
    assert rows["result right (every task's value)"] == ["yes", "yes", "yes"]
    assert float(rows["hung ranks woken (SIGCONT) -> their processes exited (s)"][2]) >= 0
    assert rows["rank 0's lines, fault -> COMMAND's end: start-cluster's, Dask's"][2][:2] == "1,"
    assert float(rows["fault -> computation done (s)"][0]) > 0  # the kill hit a running job
    assert float(rows["fault -> every lost worker removed (s)"][0]) >= 0
    assert float(rows["SIGCONT -> all connected (s)"][1]) > 0
    assert float(rows["longest scheduler loop stall (s)"][0]) > 0
    met = {(what, scenario): ok for what, scenario, _, _, ok in goals}
    assert met[("healthy workers dropped", "kill")] == "yes"
    assert met[("healthy workers dropped", "stuck")] == "yes"
    assert met[("healthy workers dropped", "hang")] == "yes"
    assert met[("result right", "kill")] == met[("result right", "stuck")] == "yes"
    assert met[("result right", "hang")] == "yes"
    assert ("loss detected: fault -> every lost worker removed (s)", "hang") in met
    assert ("loss detected: fault -> every lost worker removed (s)", "kill") in met
    assert ("longest scheduler loop stall, whole run: its loop's own CPU (s)", "stuck") in met
    assert ("longest scheduler loop stall, fault -> every lost worker removed: its loop's own "
            "CPU (s)", "kill") in met
