"""A cluster whose managing process is killed (a login node's process killer): with its
scheduler in a job of its own another process takes it over (HPCCluster.attach); with the
scheduler in the killed process, `hpc-cluster down` cancels what it left."""

from __future__ import annotations

import operator
import re
import signal
import sys
from pathlib import Path

import pytest
from elastic_support import worker_names

from dask_hpc import HPCCluster
from dask_hpc.errors import UsageError

pytestmark = pytest.mark.slurm

KILLED = """
import os, signal, sys, time
from dask_hpc import HPCCluster
cluster = HPCCluster("cpu", workers_per_node=1, walltime="00:10:00", scheduler=sys.argv[1],
                     quiet=True)
cluster.scale(jobs=int(sys.argv[2]))
cluster.wait_for_workers(1, timeout=120)
rounds = cluster.rounds
while cluster.rounds < rounds + 2:  # its state written since
    time.sleep(0.1)
print("FILE", cluster.scheduler_file, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_manager(run_cmd, env: dict, scheduler: str, jobs: int) -> Path:
    result = run_cmd([sys.executable, "-c", KILLED, scheduler, str(jobs)], env=env, timeout=240)
    assert result.returncode == -signal.SIGKILL, result.stderr
    return Path(re.search(r"^FILE (\S+)$", result.stdout, re.M).group(1))


def test_a_killed_managers_cluster_is_taken_over(
    run_cmd, shell_env, elastic_env, elastic_slurm, wait_for
) -> None:
    file = killed_manager(run_cmd, shell_env, "job", 1)
    assert len(elastic_slurm.jobs()) == 2  # the scheduler's job and the workers' live on
    cluster = HPCCluster.attach(file, quiet=True)
    try:
        with pytest.raises(UsageError, match="managed by a running process"):
            HPCCluster.attach(file)
        assert cluster.pools["cpu"].target == 1 and len(cluster.jobs) == 1
        cluster.scale(jobs=2)
        client = cluster.get_client()
        client.wait_for_workers(2, timeout=120)
        assert len({n.rsplit("-", 1)[0] for n in worker_names(client)}) == 2
        assert client.submit(operator.add, 1, 2).result() == 3
        client.close()
    finally:
        cluster.close()
    assert elastic_slurm.jobs() == [] and not file.parent.exists()


def test_hpc_cluster_down_cancels_what_a_killed_manager_left(
    run_cmd, shell_env, elastic_env, elastic_slurm, wait_for
) -> None:
    file = killed_manager(run_cmd, shell_env, "local", 2)
    assert elastic_slurm.jobs()
    with pytest.raises(UsageError) as error:
        HPCCluster.attach(file)
    assert "is gone" in str(error.value) and "hpc-cluster down" in str(error.value)
    down = run_cmd([sys.executable, "-m", "dask_hpc.elastic", "down", str(file)], env=shell_env)
    down.check()
    assert "cancelled job(s)" in down.stderr
    wait_for(lambda: not elastic_slurm.jobs(), 60, what="the jobs it left to end")
    assert not file.parent.exists()
