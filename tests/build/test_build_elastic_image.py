"""An elastic cluster whose workers run in the local image (apptainer exec, one container per
rank) on the session's real Slurm: the image `invoke build --site local` makes, built once."""

from __future__ import annotations

import operator
from pathlib import Path

import dask.config
import pytest

from dask_hpc import HPCCluster


@pytest.mark.slurm
@pytest.mark.apptainer
@pytest.mark.timeout(900)
def test_hpccluster_workers_in_the_image(
    slurm_cluster, local_image: Path, monkeypatch, tmp_path: Path, wait_for
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    settings = {"hpc.scheduler-directory": str(tmp_path / "shared"),
                "hpc.cluster.poll-interval": 0.5}
    with dask.config.set(settings):
        cluster = HPCCluster("cpu", workers_per_node=2, walltime="00:10:00",
                             image=str(local_image), quiet=True)
    try:
        script = cluster.job_script()
        assert (
            "srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --no-kill "
            f"--kill-on-bad-exit=0 apptainer exec --bind {cluster.directory} "
            '${dask_hpc_binds:+--bind "$dask_hpc_binds"} "$dask_hpc_image" start-cluster cpu 2 '
            "--join" in script
        ), script
        assert (
            f"dask_hpc_image=$(readlink -e -- {local_image})" in script
        ), script
        cluster.scale(jobs=1)
        client = cluster.get_client()
        client.wait_for_workers(2, timeout=240)
        futures = client.map(operator.mul, range(50), range(50))
        assert sum(client.gather(futures)) == sum(i * i for i in range(50))
        (job,) = cluster.jobs.values()
        client.close()
    finally:
        cluster.close()
    assert slurm_cluster.wait_job(job.job_id, 60) == ("COMPLETED", 0)
