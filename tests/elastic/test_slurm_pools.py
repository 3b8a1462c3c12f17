"""Pools: CPU and GPU workers in one cluster; adapt grows the pool the waiting tasks need.

The GPU pool's jobs run on the DeepOps site profile (Slurm, NVIDIA): they ask Slurm for a GPU
(``--gres=gpu:1``, the count read back from ``sinfo``), Slurm gives each job's tasks its
``CUDA_VISIBLE_DEVICES`` (EMULATED GRES devices), and start-cluster makes dask-cuda workers with
``GPU=1``, with dask-cuda's switch for machines without a GPU (there is none here).
"""

from __future__ import annotations

import time

import pytest
from distributed import wait
from elastic_support import worker_names
from jobs.listed import workers

pytestmark = pytest.mark.slurm


def test_adapt_grows_only_the_pool_whose_resources_the_tasks_need(make_cluster, wait_for) -> None:
    cluster = make_cluster("cpu", workers_per_node=1, site="deepops", walltime="00:10:00")
    cluster.add_pool("gpu", workers_per_node=1)
    assert "--name-prefix" in cluster.job_script("gpu") and " gpu 1 " in cluster.job_script("gpu")
    assert "#SBATCH --gres=gpu:1\n" in cluster.job_script("gpu")
    cpu, gpu = cluster.pools["cpu"], cluster.pools["gpu"]
    cluster.adapt(minimum_jobs=0, maximum_jobs=2, interval="300ms", wait_count=3)
    client = cluster.get_client()

    def slow(x: int) -> int:  # local: pickled by value
        time.sleep(0.3)
        return x + 1

    futures = client.map(slow, range(20), resources={"GPU": 1})
    wait(futures, timeout=180)
    assert client.gather(futures) == list(range(1, 21))
    assert gpu.counter >= 1 and cpu.counter == 0
    assert all("-gpu-" in n for n in worker_names(client))
    gpu_jobs = gpu.counter
    del futures
    wait_for(lambda: not cluster.jobs and not worker_names(client), 90, what="0 jobs")

    futures = client.map(slow, range(20, 40))  # no resources: the CPU pool's
    wait(futures, timeout=180)
    assert client.gather(futures) == list(range(21, 41))
    assert cpu.counter >= 1
    assert all("-cpu-" in n for n in worker_names(client))
    assert gpu.counter == gpu_jobs  # the GPU pool did not grow for CPU work
    client.close()


def test_pools_scale_on_their_own(make_cluster, wait_for) -> None:
    cluster = make_cluster("cpu", workers_per_node=2, site="deepops", walltime="00:10:00")
    cluster.add_pool("gpu", workers_per_node=1)
    cluster.scale(jobs=1)
    cluster.scale(jobs=1, pool="gpu")
    client = cluster.get_client()
    client.wait_for_workers(3, timeout=120)
    info = workers(client).values()
    resources = {str(w["name"]).split("-")[1]: w["resources"] for w in info}
    assert resources == {"cpu": {}, "gpu": {"GPU": 1}}
    cluster.scale(jobs=0, pool="gpu")
    wait_for(lambda: all("-cpu-" in n for n in worker_names(client)), 60, what="gpu gone")
    assert len(worker_names(client)) == 2
    client.close()
