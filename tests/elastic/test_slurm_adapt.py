"""adapt on a real Slurm: grows by whole jobs under load, back to the minimum when idle, and
never cancels and resubmits jobs in a loop (dask-jobqueue#498 with 2 workers per job)."""

from __future__ import annotations

import time

import pytest
from distributed import wait

pytestmark = pytest.mark.slurm


def test_adapt_grows_by_jobs_and_returns_to_minimum_without_a_loop(make_cluster, wait_for) -> None:
    cluster = make_cluster("cpu", workers_per_node=2, walltime="00:10:00")
    pool = cluster.pools["cpu"]
    cluster.adapt(minimum_jobs=0, maximum_jobs=3, interval="300ms", wait_count=3)
    client = cluster.get_client()

    def slow(x: int) -> int:  # local: pickled by value
        time.sleep(0.5)
        return x * 2

    futures = client.map(slow, range(60))
    wait_for(lambda: client.scheduler_info()["workers"], 120, what="a first worker")
    wait(futures, timeout=180)
    assert client.gather(futures) == [2 * x for x in range(60)]
    del futures  # results held keep a job (Dask closes no worker whose data has nowhere to go)
    grown = pool.counter
    assert 1 <= grown <= 3
    wait_for(
        lambda: not cluster.jobs and not client.scheduler_info()["workers"],
        90,
        what="back to 0 jobs",
    )
    # No job was cancelled before its workers came, and none was submitted again and again.
    early = [j.name for j in cluster.finished if j.cancelled and not j.ever_connected]
    assert early == [] and pool.counter == grown, (early, pool.counter)
    assert all(j.ever_connected == 2 for j in cluster.finished)
    client.close()
