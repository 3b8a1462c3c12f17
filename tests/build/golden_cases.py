"""The `invoke job` golden cases: one or more per batch system (name -> invoke arguments)."""

from __future__ import annotations

CASES: dict[str, list[str]] = {
    "pbs-aurora": ["--site", "aurora", "--nodes", "2", "--account", "datascience",
                   "--queue", "debug", "--walltime", "00:30:00", "--", "python", "pi.py"],
    "pbs-polaris": ["--site", "polaris", "--nodes", "4", "--account", "proj", "--image",
                    "/eagle/proj/dask.sif", "--", "python", "job.py", "--size", "1e9"],
    "lsf-summit": ["--site", "summit", "--nodes", "2", "--account", "abc123",
                   "--walltime", "02:00:00", "--", "python", "job.py"],
    "cobalt-thetagpu": ["--site", "thetagpu", "--nodes", "1", "--account", "proj",
                        "--queue", "full-node", "--walltime", "45", "--", "python", "job.py"],
    "slurm-perlmutter": ["--site", "perlmutter", "--nodes", "2", "--account", "m0000",
                         "--queue", "regular", "--", "python", "job.py"],
    "slurm-frontier": ["--site", "frontier", "--nodes", "1", "--account", "abc123",
                       "--worker-type", "cpu", "--workers-per-node", "56", "--", "python",
                       "job.py"],
    "slurm-deepops": ["--site", "deepops", "--nodes", "2", "--workers-per-node", "8",
                      "--job-name", "rapids", "--", "python", "bench.py", "--gpus", "16"],
}
