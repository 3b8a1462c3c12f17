"""start-cluster --join --name-prefix: an elastic cluster's job names its workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import placeholder_scheduler_file, start_cluster


def test_joining_workers_take_the_prefix(run_cmd, cluster_env, tmp_path: Path) -> None:
    sched = placeholder_scheduler_file(tmp_path / "scheduler.json")
    result = run_cmd(
        [*start_cluster(), "cpu", "2", "--join", str(sched), "--name-prefix", "c1-cpu-7",
         "--dry-run"],
        env=cluster_env,
    )
    result.check()
    names = [p["name"] for p in json.loads(result.stdout)["processes"]]
    assert names == ["c1-cpu-7-0-0", "c1-cpu-7-0-1"]


@pytest.mark.parametrize(
    "args",
    [
        ["--name-prefix", "job-1"],  # without --join
        ["--join", "{sched}", "--name-prefix", "a b"],
        ["--join", "{sched}", "--name-prefix", "-x"],
    ],
)
def test_bad_prefix_is_one_line(run_cmd, cluster_env, tmp_path: Path, args: list[str]) -> None:
    sched = placeholder_scheduler_file(tmp_path / "scheduler.json")
    argv = [a.format(sched=sched) for a in args]
    result = run_cmd([*start_cluster(), "cpu", "1", *argv, "--dry-run"], env=cluster_env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--name-prefix" in lines[0], result.stderr
