"""`hpc-cluster up` and `script` take every setting of HPCCluster (the Python-only ones aside:
the event loop, quiet, log silencing)."""

from __future__ import annotations

import inspect

from dask_hpc import HPCCluster
from dask_hpc.elastic.cli_args import build_parser, cluster_kwargs

PYTHON_ONLY = {"self", "jobqueue", "asynchronous", "loop", "quiet", "silence_logs"}


def test_up_takes_every_hpccluster_setting() -> None:
    settings = set(inspect.signature(HPCCluster.__init__).parameters) - PYTHON_ONLY
    argv = ["up", "gpu", "--launcher", "mpi", "--pool", "big", "--scheduler-walltime", "02:00:00",
            "--lifetime-margin", "90", "--cpus-per-worker", "4", "--memory-per-worker", "8GB",
            "--gpus-per-node", "2", "--interface", "ib0", "--dashboard-address", ":8788",
            "--directory", "/shared/me", "--log-directory", "/shared/me/logs", "--name", "mine",
            "--jobs", "3"]
    args = build_parser().parse_args(argv)
    given = cluster_kwargs(args)
    assert settings - set(given) == {"jobs"} and args.jobs == 3
    assert given["kind"] == "gpu" and given["launcher"] == "mpi" and given["pool"] == "big"
    assert (given["cpus_per_worker"], given["memory_per_worker"], given["gpus_per_node"]) == (
        4, "8GB", 2)
    assert (given["lifetime_margin"], given["log_directory"]) == (90.0, "/shared/me/logs")
