"""Bad input to HPCCluster: one clear line, and nothing left in the queue."""

from __future__ import annotations

import re
import sys
from pathlib import Path

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
        # issue 44: the site's rules and the names and launcher a job script carries
        (
            {"site": "perlmutter", "account": "m0000"},
            "a perlmutter job without --queue gets the default QOS debug, whose limit 00:30:00",
        ),
        ({"account": "x y"}, "--account 'x y' is not a name the batch script can carry"),
        ({"launcher": "pals"}, "launcher pals does not run under slurm (it runs under pbs)"),
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
    cluster = make_cluster(
        "cpu", workers_per_node=1, walltime="00:10:00", worker_args=["--interface", "nosuch0"]
    )
    cluster.scale(jobs=3)
    with pytest.raises(UsageError) as error:
        cluster.wait_for_workers(1, timeout=120)
    text = one_line(error)
    assert "before any worker connected" in text
    assert "network interface 'nosuch0' has no IPv4 address" in text
    wait_for(lambda: not elastic_slurm.jobs(), 60, what="the other jobs to be cancelled")
    assert cluster.pools["cpu"].counter == 3  # no resubmission


HPC_CLUSTER = [sys.executable, "-m", "dask_hpc.elastic"]


def one_error_line(result, said: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("hpc-cluster: error: "), result.stderr
    assert said in lines[0], lines[0]


def test_a_site_that_requires_an_account_refuses_a_script_without_one(
    run_cmd, shell_env, elastic_slurm
) -> None:
    """The one place an account is written (batch.script.render) checks it: hpc-cluster
    script, up and HPCCluster alike (up and HPCCluster render a job before they start)."""
    result = run_cmd([*HPC_CLUSTER, "script", "gpu", "--site", "polaris"], env=shell_env)
    one_error_line(
        result,
        "polaris's batch system refuses a job that names no project to "
        "charge (https://docs.alcf.anl.gov/running-jobs/job-and-queue-scheduling/, "
        "read 2026-11-29); give --account PROJECT (HPCCluster: account=)",
    )
    assert result.stdout == ""
    given = run_cmd(
        [*HPC_CLUSTER, "script", "gpu", "--site", "polaris", "--account", "proj"], env=shell_env
    )
    assert given.returncode == 0 and "#PBS -A proj\n" in given.stdout, given.stderr


def test_a_command_on_no_workers_is_refused(run_cmd, shell_env, elastic_slurm) -> None:
    """It ran COMMAND on a cluster of 0 workers, silently (issue 44)."""
    result = run_cmd([*HPC_CLUSTER, "up", "cpu", "--", "true"], env=shell_env)
    one_error_line(
        result, "COMMAND would run on a cluster of no workers; give --jobs N or --adapt MIN:MAX"
    )
    assert elastic_slurm.jobs() == []


def test_a_command_that_is_not_executable_names_chmod(
    run_cmd, shell_env, elastic_slurm, tmp_path: Path
) -> None:
    (tmp_path / "job.py").write_text("print(1)\n")
    result = run_cmd(
        [*HPC_CLUSTER, "up", "cpu", "--jobs", "1", "--", "./job.py"], env=shell_env, cwd=tmp_path
    )
    one_error_line(
        result,
        "command './job.py' is not executable; chmod +x ./job.py, or run it "
        "with its interpreter, e.g. -- python ./job.py",
    )


def test_a_job_the_batch_system_refuses_is_said_once(run_cmd, shell_env, elastic_slurm) -> None:
    """The cluster says why its pool stopped; `up` said the same line again as it ended."""
    result = run_cmd(
        [
            *HPC_CLUSTER,
            "up",
            "cpu",
            "--workers-per-node",
            "1",
            "--jobs",
            "1",
            "--queue",
            "nosuchpartition",
            "--walltime",
            "00:10:00",
            "--",
            "true",
        ],
        env=shell_env,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    refusals = [line for line in result.stderr.splitlines() if "sbatch refused job" in line]
    assert len(refusals) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert elastic_slurm.jobs() == []


def test_every_option_has_help_and_there_is_a_version(run_cmd, shell_env) -> None:
    from dask_hpc import __version__
    from dask_hpc.elastic.cli_args import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse's own)
    for name in ("up", "script"):
        bare = [
            a.option_strings
            for a in commands[name]._actions  # noqa: SLF001
            if a.option_strings and not a.help
        ]
        assert bare == [], (name, bare)
    version = run_cmd([*HPC_CLUSTER, "--version"], env=shell_env).check()
    assert version.stdout == f"dask-hpc {__version__}\n"
    text = run_cmd([*HPC_CLUSTER, "--help"], env=shell_env).check().stdout
    assert text.count("an elastic cluster from the shell") == 1 and "``" not in text
    wrong = run_cmd([*HPC_CLUSTER, "script", "cpu", "--launcher", "srun"], env=shell_env)
    one_error_line(
        wrong,
        "invalid choice: 'srun' (choose from 'flux', 'jsrun', 'mpi', 'mpich', "
        "'openmpi', 'pals', 'slurm')",
    )
