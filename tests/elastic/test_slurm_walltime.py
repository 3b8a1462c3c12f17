"""Walltime: a computation on persisted data outlives three walltimes of its jobs.

Each job's workers retire themselves before its walltime (Dask's worker lifetime, set per job:
their data moves to the other workers), and the cluster submits each replacement early enough
that it is connected by then. One-minute jobs (Slurm's shortest walltime) and 3 min 5 s of
computing: every job ends by itself (COMPLETED, status 0, never TIMEOUT), the result is
right, and no key is lost or computed twice.
"""

from __future__ import annotations

import pytest
from distributed import wait
from elastic_support import computed_twice, keep_computing

pytestmark = pytest.mark.slurm

WALLTIME = 60
RUN_FOR = 3 * WALLTIME + 5


@pytest.mark.timeout(RUN_FOR + 240)
def test_a_computation_outlives_three_walltimes_with_no_key_lost(
    make_cluster, elastic_slurm, wait_for
) -> None:
    import dask.array as da  # here: ~0.8 s of every pytest process's collection otherwise
    import numpy as np

    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:01:00")
    duration, stagger = cluster.pools["cpu"].lifetime()
    assert duration + stagger < WALLTIME - 10  # every worker retires well before the walltime
    cluster.scale(jobs=2)
    client = cluster.get_client()
    client.wait_for_workers(2, timeout=120)

    x = da.arange(4000, chunks=100).persist()  # 40 chunks, computed once, kept throughout
    wait(x)
    done = keep_computing(cluster, client, x, int(np.arange(4000).sum()), RUN_FOR, 0.25)
    assert done.total == done.expected, done
    assert done.fewest == 2, done  # the replacements were there before the jobs they replace left
    assert computed_twice(cluster) == []  # no key lost, so none computed again

    ended = [j for j in cluster.finished if j.ever_connected]
    assert len(ended) >= 4, [(j.name, j.batch_state) for j in cluster.finished]
    for job in ended:
        assert elastic_slurm.job_state(job.job_id) == ("COMPLETED", 0), job.name
    assert not [j for j in cluster.finished if not j.ever_connected]
    client.close()
