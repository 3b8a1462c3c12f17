"""Bad input to HPCCluster: one clear line, and nothing left in the queue."""

from __future__ import annotations

import re

import pytest

from dask_hpc import HPCCluster
from dask_hpc.errors import UsageError

pytestmark = pytest.mark.slurm


def one_line(error: pytest.ExceptionInfo[UsageError]) -> str:
    text = str(error.value)
    assert "\n" not in text and text, text
    return text


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"site": "nowhere"}, "unknown site 'nowhere'"),
        ({"workers_per_node": 0}, "workers_per_node must be a whole number"),
        ({"walltime": "1:75"}, "bad walltime '1:75'"),
        ({"walltime": "00:00:30"}, "does not fit a walltime of 30 s"),
        ({"scheduler": "elsewhere"}, "scheduler='elsewhere'"),
        ({"kind": "tpu"}, "unknown worker kind 'tpu'"),
        ({"image": "/nonexistent/dask.sif"}, "image /nonexistent/dask.sif not found"),
        ({"site": "thetagpu"}, "batch system cobalt has no submit/status/cancel commands"),
        ({"worker_args": ["--join", "x"]}, "worker_args may not hold --join"),
        ({"interface": "nosuch0"}, "network interface 'nosuch0'"),
        ({"dashboard_address": "localhost:0"}, "'localhost:0' names a host"),
    ],
)
def test_bad_arguments_are_one_line_before_anything_starts(
    elastic_env, elastic_slurm, kwargs, said
) -> None:
    with pytest.raises(UsageError) as error:
        HPCCluster(**kwargs)
    assert said in one_line(error)
    assert elastic_slurm.jobs() == []
    assert not list(elastic_env.glob("dask-hpc-*"))  # no cluster directory left either


def test_a_missing_batch_command_is_one_line(elastic_env, monkeypatch, tmp_path) -> None:
    with monkeypatch.context() as patch:  # no sbatch, no squeue: as before `module load`
        patch.setenv("PATH", str(tmp_path))
        with pytest.raises(UsageError) as error:
            HPCCluster("cpu", batch_system="slurm")
        assert "sbatch not found" in one_line(error)
        with pytest.raises(UsageError) as error:
            HPCCluster("cpu")  # and none detected
        assert "no batch system here" in one_line(error)


def test_a_walltime_the_queue_never_runs_is_one_line_and_nothing_stays_queued(
    make_cluster, elastic_slurm, wait_for
) -> None:
    """This Slurm (no EnforcePartLimits) queues a job over its partition's MaxTime, forever."""
    cluster = make_cluster("cpu", workers_per_node=1, queue="short", walltime="00:05:00")
    cluster.scale(jobs=2)
    with pytest.raises(UsageError) as error:
        cluster.wait_for_workers(1, timeout=60)
    text = one_line(error)
    # Slurm 22.05 says PartitionConfig or PartitionTimeLimit, depending on its timing.
    assert re.search(r"is held for Partition(Config|TimeLimit), a limit", text), text
    assert "will never start" in text
    wait_for(lambda: not elastic_slurm.jobs(), 30, what="both jobs cancelled")
    assert cluster.pools["cpu"].counter == 2


def test_a_job_that_fails_at_once_is_one_line_and_its_siblings_are_cancelled(
    make_cluster, elastic_slurm, wait_for
) -> None:
    # start-cluster refuses its node on every rank: each job ends at once, in error (options
    # it does not take are refused before any job: test_jobqueue_args.py).
    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:10:00",
                           worker_args=["--interface", "nosuch0"])
    cluster.scale(jobs=3)
    with pytest.raises(UsageError) as error:
        cluster.wait_for_workers(1, timeout=120)
    text = one_line(error)
    assert "before any worker connected" in text
    assert "network interface 'nosuch0' has no IPv4 address" in text
    wait_for(lambda: not elastic_slurm.jobs(), 60, what="the other jobs to be cancelled")
    assert cluster.pools["cpu"].counter == 3  # no resubmission
