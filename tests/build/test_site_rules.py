"""A site's own rules, as its profile holds them with their sources, kept by every job script
(issue 44): ALCF refuses a job that names no project, NERSC puts a job without a QOS in debug
(30 minutes); names written into directives are checked; a launcher runs only under the batch
systems that start it; a worker asks no more CPUs than a node has (item 6; El Capitan: 21 of
each APU's 24 cores, item 3); a job without an image checks once that what its ranks run is
there (item 4); each refusal is one line naming the fix, exit 2, nothing written."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from dask_hpc.batch.rules import launcher_names, runnable_lines
from dask_hpc.batch.script import JobRequest, data, render
from dask_hpc.errors import UsageError
from dask_hpc.planning.sites import _from_mapping, all_sites, load_site

HPC_JOB = [sys.executable, "-m", "dask_hpc.batch"]
ALCF = ["aurora", "polaris", "sophia"]


def refused(result, *fragments: str) -> str:
    """One line on stderr, exit 2, nothing on stdout; the line."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert len(lines) == 1 and lines[0].startswith("hpc-job: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_alcf_sites_require_an_account_with_its_source() -> None:
    required = {name for name, site in all_sites().items() if site.account_required}
    assert required == set(ALCF)
    for name in ALCF:
        assert load_site(name).account_required == (
            "https://docs.alcf.anl.gov/running-jobs/job-and-queue-scheduling/, read 2026-11-29"
        )


@pytest.mark.parametrize("site", ALCF)
def test_a_job_without_account_is_refused_and_nothing_is_written(
    run_cmd, site: str, tmp_path: Path
) -> None:
    out = tmp_path / "job.pbs"
    result = run_cmd(
        [*HPC_JOB, "--site", site, "--nodes", "2", "--output", str(out), "--", "python", "job.py"],
        timeout=60,
    )
    refused(
        result,
        f"{site}'s batch system refuses a job that names no project to charge",
        "docs.alcf.anl.gov",
        "give --account PROJECT",
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []
    given = run_cmd(
        [
            *HPC_JOB,
            "--site",
            site,
            "--nodes",
            "2",
            "--account",
            "MyProject",
            "--",
            "python",
            "job.py",
        ],
        timeout=60,
    )
    assert given.returncode == 0 and given.stderr == "", given.stderr
    assert "#PBS -A MyProject\n" in given.stdout


def test_an_account_in_the_users_own_directives_counts() -> None:
    """HPCCluster(job_directives=["-A proj"]) or jobqueue's job_extra_directives."""
    text = render(JobRequest(site="polaris", nodes=1, command=["true"], directives=["-A proj"]))
    assert "#PBS -A proj\n" in text


def test_another_batch_system_on_the_site_is_not_held_to_its_rules() -> None:
    text = render(
        JobRequest(
            site="polaris",
            nodes=1,
            command=["true"],
            batch_system="slurm",
            workers_per_node=1,
            worker_type="cpu",
            cpus_per_worker=1,
        )
    )
    assert "--account" not in text


def test_perlmutter_without_a_qos_fits_the_debug_qos_or_is_refused(run_cmd) -> None:
    default = load_site("perlmutter").default_queue
    assert default is not None and (default.name, default.walltime) == ("debug", "00:30:00")
    assert default.source == "https://docs.nersc.gov/jobs/policy/, read 2026-11-29"
    base = [*HPC_JOB, "--site", "perlmutter", "--nodes", "2", "--account", "m0000"]
    result = run_cmd([*base, "--", "python", "job.py"], timeout=60)
    refused(
        result,
        "without --queue gets the default QOS debug",
        "limit 00:30:00",
        "walltime asked, 01:00:00",
        "give --queue regular",
        "--walltime 00:30:00 or less",
    )
    short = run_cmd([*base, "--walltime", "00:30:00", "--", "python", "job.py"], timeout=60)
    assert short.returncode == 0 and "--qos" not in short.stdout, short.stderr
    regular = run_cmd(
        [*base, "--queue", "regular", "--walltime", "06:00:00", "--", "python", "job.py"],
        timeout=60,
    )
    assert regular.returncode == 0, regular.stderr
    assert "#SBATCH --qos=regular\n" in regular.stdout


def test_a_rule_without_its_source_is_refused() -> None:
    profile = {
        "name": "x",
        "description": "x",
        "batch_system": "pbs",
        "launcher": "pals",
        "node_local_storage": False,
        "scheduler_directory": "$HOME",
        "batch": {"account": {"required": True}},
    }
    with pytest.raises(ValueError, match="batch.account has no source, read"):
        _from_mapping(profile)
    profile["batch"] = {"default_queue": {"name": "debug", "source": "u", "read": "d"}}
    with pytest.raises(ValueError, match="batch.default_queue has no walltime"):
        _from_mapping(profile)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--account", "x y"),
        ("--account", "p\n#PBS -l select=99"),
        ("--queue", "$(id)"),
        ("--account", "'proj'"),
        ("--job-name", "a;b"),
    ],
)
def test_names_a_directive_cannot_carry_are_refused(run_cmd, option: str, value: str) -> None:
    result = run_cmd(
        [
            *HPC_JOB,
            "--site",
            "generic",
            "--batch-system",
            "pbs",
            "--nodes",
            "1",
            option,
            value,
            "--",
            "python",
            "job.py",
        ],
        timeout=60,
    )
    refused(
        result,
        f"{option} {value!r} is not a name the batch script can carry",
        "letters, digits and _ . @ + - only",
        f"e.g. {option} ",
    )


@pytest.mark.parametrize("value", ["m0000", "ABC_123", "my-proj.2", "gpu@server", "a,b"])
def test_names_sites_use_are_written(value: str) -> None:
    text = render(
        JobRequest(
            site="generic",
            batch_system="slurm",
            nodes=1,
            command=["true"],
            account=value,
            queue=value,
            workers_per_node=1,
            cpus_per_worker=1,
            worker_type="cpu",
        )
    )
    assert f"#SBATCH --account={value}\n" in text and f"#SBATCH --partition={value}\n" in text


def test_a_launcher_the_batch_system_does_not_run_is_refused(run_cmd) -> None:
    result = run_cmd(
        [
            *HPC_JOB,
            "--site",
            "aurora",
            "--account",
            "p",
            "--nodes",
            "1",
            "--launcher",
            "slurm",
            "--",
            "python",
            "job.py",
        ],
        timeout=60,
    )
    refused(
        result,
        "launcher slurm does not run under pbs (it runs under slurm)",
        "drop --launcher for the site's own, or use one of: mpi, mpich, openmpi, pals",
    )
    wrong = run_cmd(
        [
            *HPC_JOB,
            "--site",
            "aurora",
            "--account",
            "p",
            "--nodes",
            "1",
            "--launcher",
            "srun",
            "--",
            "python",
            "job.py",
        ],
        timeout=60,
    )
    line = refused(wrong, "invalid choice: 'srun'", "'pals'")
    assert "pals-list" not in line and "openmpi-pbs" not in line  # internal names


def test_every_launcher_named_runs_under_known_batch_systems() -> None:
    systems = set(data()["batch_systems"])
    for name in launcher_names():
        assert name in data()["launchers"], name
        assert set(data()["launcher_systems"][name]) <= systems, name
    with pytest.raises(UsageError, match="unknown launcher 'pals-list'; use one of: flux, "):
        render(
            JobRequest(site="polaris", nodes=1, account="p", command=["true"], launcher="pals-list")
        )


@pytest.mark.parametrize("site", ["summit", "thetagpu"])
def test_a_retired_machine_is_one_warning_line(run_cmd, site: str) -> None:
    result = run_cmd(
        [*HPC_JOB, "--site", site, "--nodes", "1", "--account", "p", "--", "python", "job.py"],
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.startswith("#!/bin/bash"), result.stderr
    retired = load_site(site).retired
    assert result.stderr == (
        f"hpc-job: warning: {site} was retired ({retired}): no machine runs this script any "
        "more (the profile stays for its users); pick another --site\n"
    )
    current = run_cmd(
        [
            *HPC_JOB,
            "--site",
            "frontier",
            "--nodes",
            "1",
            "--account",
            "p",
            "--",
            "python",
            "job.py",
        ],
        timeout=60,
    )
    assert current.returncode == 0 and current.stderr == "", current.stderr


# ---------------------------------------------------------------- a node's CPUs (item 6)
@pytest.mark.parametrize(
    ("site", "workers", "asked", "has", "most"),
    [
        ("polaris", [], 64, "64 for jobs (32 cores x 2 threads; site profile)", 16),
        ("frontier", [], 8, "56 for jobs (56 cores; site profile)", 7),
        ("elcapitan", [], 24, "84 for jobs (84 cores; site profile)", 21),
        ("perlmutter", [], 33, "128 for jobs (64 cores x 2 threads; site profile)", 32),
        (
            "aurora",
            ["--workers-per-node", "12"],
            18,
            "204 for jobs (102 cores x 2 threads, 2 kept for the system; site profile)",
            17,
        ),
    ],
)
def test_more_cpus_than_a_node_has_are_refused(
    run_cmd, tmp_path: Path, site: str, workers: list[str], asked: int, has: str, most: int
) -> None:
    """Polaris --cpus-per-worker 64: PALS's --depth=64 x 4 ranks on a 32-core node."""
    out = tmp_path / "job.sh"
    base = [*HPC_JOB, "--site", site, "--nodes", "1", "--account", "p", "--queue", "regular",
            "--output", str(out), *workers]  # fmt: skip
    result = run_cmd([*base, "--cpus-per-worker", str(asked), "--", "python", "job.py"])
    refused(result, "CPUs each is", f"but a {site} node has {has}",
            f"ask at most {most} per worker (--cpus-per-worker {most}, HPCCluster: "
            "cpus_per_worker=), or start fewer workers per node")  # fmt: skip
    assert not out.exists() and list(tmp_path.iterdir()) == []
    fits = run_cmd([*base, "--cpus-per-worker", str(most), "--", "python", "job.py"])
    assert fits.returncode == 0 and fits.stderr == "", fits.stderr
    assert out.is_file()


def test_hpc_cluster_refuses_more_cpus_than_a_node_has(run_cmd) -> None:
    argv = [sys.executable, "-m", "dask_hpc.elastic", "script", "gpu", "--site", "polaris",
            "--account", "p", "--cpus-per-worker", "64"]  # fmt: skip
    result = run_cmd(argv, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and result.stdout == "" and len(lines) == 1, result.stderr
    assert lines[0].startswith("hpc-cluster: error: 4 worker(s) per node x 64 CPUs each is 256")


def test_el_capitan_asks_the_21_cores_of_each_apu_a_job_gets() -> None:
    """3 of each MI300A's 24 cores are the system's: 4 workers ask 21 cores each, not 24."""
    text = render(JobRequest(site="elcapitan", nodes=2, command=["python", "job.py"]))
    assert "#FLUX: --cores-per-slot=21\n" in text
    assert "flux run --nodes=2 --ntasks=8 --cores-per-task=21 --gpus-per-task=1 " in text
    assert load_site("elcapitan").cpu_cores == 84


# ---------------------------------------------------------------- what the ranks run (item 4)
def _check_script(tmp_path: Path, python: str | None) -> Path:
    script = tmp_path / "check.sh"
    script.write_text("\n".join(["set -euo pipefail", *runnable_lines(python), "echo started"]))
    return script


def test_a_job_without_start_cluster_on_its_path_stops_in_one_line(run_cmd, tmp_path: Path) -> None:
    """Perlmutter's ranks run start-cluster from the job's PATH: not there (the environment not
    activated), every rank would exit 127; the job says so once, before the launcher."""
    script = _check_script(tmp_path, None)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    bash = shutil.which("bash")
    assert bash and shutil.which("start-cluster"), "bash and start-cluster are needed here"
    missing = run_cmd([bash, str(script)], env={**os.environ, "PATH": str(empty)}, timeout=30)
    assert missing.returncode == 2 and missing.stdout == "", missing.stdout + missing.stderr
    assert missing.stderr.splitlines() == [
        f"dask-hpc: start-cluster is not on this job's PATH ({empty}); activate the Python "
        "environment with dask-hpc before submitting (sbatch and flux batch pass your shell's "
        "environment on; qsub needs -V), or give --python /path/to/env/bin/python"
    ]
    here = run_cmd([bash, str(script)], timeout=30)
    assert here.returncode == 0 and here.stdout == "started\n", here.stderr


def test_a_python_without_dask_hpc_stops_in_one_line(run_cmd, tmp_path: Path) -> None:
    """--python: it must import dask_hpc, and a dask_hpc/ planted in the submit directory does
    not count (the working directory is not on the check's path)."""
    no_site = tmp_path / "bin" / "python"
    no_site.parent.mkdir()
    no_site.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # no site-packages
    no_site.chmod(0o755)
    planted = tmp_path / "dask_hpc"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    bad = run_cmd(["bash", str(_check_script(tmp_path, str(no_site)))], cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and bad.stdout == "", bad.stdout + bad.stderr
    assert bad.stderr.splitlines() == [
        f"dask-hpc: --python {no_site} cannot import dask_hpc on this node; install dask-hpc "
        "into that Python, or give the one that has it"
    ]
    good = run_cmd(["bash", str(_check_script(tmp_path, sys.executable))], cwd=tmp_path)
    assert good.returncode == 0 and good.stdout == "started\n", good.stderr
