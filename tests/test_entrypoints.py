"""The thin shell wrappers in entrypoints/ reach the same command."""

from __future__ import annotations

import json
from pathlib import Path

from support import REPO

ENTRY = REPO / "entrypoints"


def test_start_cluster_script_is_the_cli(run_cmd, cluster_env) -> None:
    result = run_cmd([ENTRY / "start-cluster", "cpu", "2", "--dry-run"], env=cluster_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["total_workers"] == 2


def test_aurora_drop_in_keeps_the_guides_arguments(run_cmd, cluster_env) -> None:
    result = run_cmd([ENTRY / "start_dask_aurora.sh", "gpu", "6", "--dry-run", "--", "python",
                      "job.py"], env=cluster_env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["site"] == "aurora" and plan["command"] == ["python", "job.py"]
    masks = [p["env"]["ZE_AFFINITY_MASK"] for p in plan["processes"] if p["role"] == "worker"]
    assert masks == ["0", "1", "2", "3", "4", "5"]


def test_aurora_drop_in_without_arguments_says_how(run_cmd, cluster_env) -> None:
    result = run_cmd([ENTRY / "start_dask_aurora.sh"], env=cluster_env)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("usage: start_dask_aurora.sh cpu|gpu")


def test_wrappers_hold_no_logic() -> None:
    for script in ENTRY.iterdir():
        code = [ln for ln in script.read_text().splitlines() if ln and not ln.startswith("#")]
        assert len(code) <= 6, script  # argument passing only; the logic is in dask_hpc
        assert Path(script).stat().st_mode & 0o111
