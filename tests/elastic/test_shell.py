"""hpc-cluster: the elastic cluster from the shell (run as ``python -m dask_hpc.elastic``, what
the ``hpc-cluster`` console script runs)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

HPC_CLUSTER = [sys.executable, "-m", "dask_hpc.elastic"]
PROBE = (
    "import dask; from distributed import Client; c = Client(); "
    "print('WORKERS', len(c.scheduler_info()['workers']), c.scheduler.address[:6]); "
    "print('LINK', dask.config.get('distributed.dashboard.link'))"
)


def test_up_runs_a_command_on_the_cluster_then_closes_it(run_cmd, shell_env, elastic_slurm):
    result = run_cmd(
        [*HPC_CLUSTER, "up", "cpu", "--workers-per-node", "1", "--jobs", "2",
         "--walltime", "00:10:00", "--", sys.executable, "-c", PROBE],
        env=shell_env,
        timeout=240,
    )
    result.check()
    assert "WORKERS 2 tls://" in result.stdout, result.stdout + result.stderr
    assert "closed" in result.stderr
    assert elastic_slurm.jobs() == []
    # Its stderr is no terminal (a job's log, a pipe): the dashboard link without its token;
    # COMMAND's own link has none either (its output is a file others may read).
    link = re.search(r"^LINK (\S+)$", result.stdout, re.M).group(1)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/status", link), link
    assert "token=" not in result.stderr, result.stderr
    assert f"dashboard: {link}\n" in result.stderr, result.stderr
    assert "hpc-cluster links" in result.stderr


def test_a_running_cluster_is_scaled_watched_and_closed_from_another_shell(
    run_cmd, shell_env, elastic_slurm, tmp_path: Path, wait_for
) -> None:
    link = tmp_path / "cluster.json"
    up = subprocess.Popen(
        [*HPC_CLUSTER, "up", "cpu", "--workers-per-node", "1", "--jobs", "1",
         "--walltime", "00:10:00", "--scheduler-file", str(link)],
        env=shell_env, stderr=subprocess.PIPE, text=True,
    )
    try:
        def status() -> dict | None:
            if not link.exists():
                return None
            done = run_cmd([*HPC_CLUSTER, "status", str(link), "--json"], env=shell_env)
            return json.loads(done.stdout) if done.returncode == 0 else None

        wait_for(lambda: (status() or {"pools": [{}]})["pools"][0].get("workers") == 1, 120,
                 what="one worker")
        scaled = run_cmd([*HPC_CLUSTER, "scale", str(link), "--jobs", "2"], env=shell_env)
        scaled.check()
        assert "pool cpu: 2 job(s)" in scaled.stderr
        wait_for(lambda: status()["pools"][0]["queued"] + status()["pools"][0]["running"] == 2,
                 60, what="a second job")
        table = run_cmd([*HPC_CLUSTER, "status", str(link)], env=shell_env).check().stdout
        assert re.search(r"^cpu  cpu  1  2  \d  \d  \d  -$", table, re.M), table
        run_cmd([*HPC_CLUSTER, "down", str(link)], env=shell_env).check()
        _, err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()
    assert up.returncode == 0, err
    assert not link.exists()
    assert elastic_slurm.jobs() == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["up", "cpu", "--site", "nowhere"], "unknown site 'nowhere'"),
        (["up", "cpu", "--jobs", "2", "--adapt", "0:2"], "not allowed with argument"),
        (["up", "cpu", "--adapt", "3:1"], "'3:1' is not MIN:MAX"),
        (["up", "cpu", "--", "no-such-command"], "command 'no-such-command' not found"),
        (["scale", "/nonexistent.json", "--jobs", "1"], "no running cluster at"),
        (["status", "x.json", "--", "ls"], "only `up` runs a COMMAND"),
        (["up", "cpu", "--scheduler-file", "/nonexistent/c.json"], "no directory /nonexistent"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(run_cmd, shell_env, elastic_slurm, argv, said):
    result = run_cmd([*HPC_CLUSTER, *argv], env=shell_env, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpc-cluster: error:"), result.stderr
    assert said in lines[0]
    assert elastic_slurm.jobs() == []


def test_script_prints_the_job_script_and_submits_nothing(run_cmd, shell_env, elastic_slurm):
    result = run_cmd(
        [*HPC_CLUSTER, "script", "gpu", "--site", "polaris", "--account", "proj",
         "--walltime", "00:30:00", "--image", "/nonexistent.sif"],
        env=shell_env,
    )
    assert result.returncode == 2 and "image /nonexistent.sif not found" in result.stderr
    image = Path(shell_env["DASK_HPC__SCHEDULER_DIRECTORY"]).parent / "dask.sif"
    image.write_bytes(b"")
    result = run_cmd(
        [*HPC_CLUSTER, "script", "gpu", "--site", "polaris", "--account", "proj",
         "--walltime", "00:30:00", "--image", str(image)],
        env=shell_env,
    ).check()
    assert "#PBS -l select=1" in result.stdout and "#PBS -A proj" in result.stdout
    assert "mpiexec -n 4 --ppn 4 --depth=8 --cpu-bind depth apptainer exec --nv --bind " in (
        result.stdout
    )
    assert f"dask_hpc_image=$(readlink -e -- {image})" in result.stdout
    assert ' "$dask_hpc_image" start-cluster gpu 4 --join ' in result.stdout
    assert elastic_slurm.jobs() == []
