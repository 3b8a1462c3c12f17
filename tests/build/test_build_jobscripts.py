"""`invoke job`: golden batch scripts for every batch system, and one submitted to real Slurm."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from build_support import REPO, invoke_argv
from golden_cases import CASES

GOLDEN = Path(__file__).resolve().parent / "golden"
HPC_JOB = [sys.executable, "-m", "dask_hpc.batch"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_job_script_matches_golden(invoke, name: str) -> None:
    result = invoke("job", *CASES[name])
    assert result.returncode == 0, result.stderr
    assert result.stdout == (GOLDEN / f"{name}.sh").read_text()


def test_every_batch_system_has_a_golden() -> None:
    from dask_hpc.planning.sites import all_sites

    systems = {s.batch_system for s in all_sites().values()} - {"none"}
    assert (
        systems
        == {name.split("-")[0] for name in CASES}
        == {"pbs", "lsf", "cobalt", "slurm", "flux"}
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_installed_command_writes_the_same_script(run_cmd, name: str, tmp_path) -> None:
    """hpc-job (the package's command: no checkout, no invoke) is invoke job, from anywhere."""
    result = run_cmd(
        [sys.executable, "-m", "dask_hpc.batch", *CASES[name]], cwd=tmp_path, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (GOLDEN / f"{name}.sh").read_text()


def test_hpc_job_into_a_closed_pipe_ends_quietly(tagged_env) -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dask_hpc.batch", *CASES["pbs-aurora"]],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=tagged_env,
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", done.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["--site", "generic", "--nodes", "1", "--", "x"],
            "hpc-job: error: site generic has no batch system; name one with --batch-system",
        ),
        (
            ["--site", "polaris", "--", "x"],
            "hpc-job: error: the following arguments are required: --nodes; see hpc-job --help",
        ),
        (
            ["--site", "polaris", "--nodes", "1", "--memory-per-worker", "16", "--", "x"],
            "hpc-job: error: memory per worker '16' is 16 B, too little for a Dask worker",
        ),
        # issue 44: a 22-line traceback (FileNotFoundError on its temporary name) before
        (
            [
                "--site",
                "polaris",
                "--nodes",
                "1",
                "--account",
                "p",
                "--output",
                "/proc/x.pbs",
                "--",
                "x",
            ],
            "hpc-job: error: --output /proc/x.pbs: cannot write there (No such file or directory); "
            "give a path in a directory of yours, or leave --output out for stdout",
        ),
        (
            ["--site", "polaris", "--nodes", "1", "--batch-system", "pbspro", "--", "x"],
            "hpc-job: error: argument --batch-system: invalid choice: 'pbspro' (choose from "
            "'slurm', 'pbs', 'lsf', 'flux', 'cobalt')",
        ),
    ],
)
def test_hpc_job_bad_input_is_one_line(run_cmd, args: list[str], says: str) -> None:
    result = run_cmd([sys.executable, "-m", "dask_hpc.batch", *args], timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(says), result.stderr


def test_a_command_that_is_not_executable_names_chmod(run_cmd, tmp_path: Path) -> None:
    """`-- ./job.py` without its x bit: rank 0 said only "not found", once the job ran."""
    (tmp_path / "job.py").write_text("print(1)\n")
    argv = [*HPC_JOB, "--site", "polaris", "--nodes", "1", "--account", "p", "--", "./job.py"]
    result = run_cmd(argv, cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr == (
        "hpc-job: error: command './job.py' is not executable; chmod +x ./job.py, or run it "
        "with its interpreter, e.g. -- python ./job.py\n"
    )
    (tmp_path / "job.py").chmod(0o755)
    assert run_cmd(argv, cwd=tmp_path, timeout=60).returncode == 0
    assert run_cmd([*argv[:-1], "./elsewhere.py"], cwd=tmp_path, timeout=60).returncode == 0


def test_help_says_each_thing_once_and_lists_the_choices(run_cmd) -> None:
    from dask_hpc import __version__
    from dask_hpc.batch.rules import launcher_names
    from dask_hpc.batch.script import data

    text = run_cmd([*HPC_JOB, "--help"], timeout=60).check().stdout
    assert text.count("print a site's batch script that runs COMMAND") == 1, text
    assert "``" not in text
    flat = " ".join(text.split())
    assert "slurm, pbs, lsf, flux or cobalt" in flat and set(data()["batch_systems"]) == {
        "slurm",
        "pbs",
        "lsf",
        "flux",
        "cobalt",
    }
    assert f"{', '.join(launcher_names()[:-1])} or {launcher_names()[-1]}" in flat
    version = run_cmd([*HPC_JOB, "--version"], timeout=60).check()
    assert version.stdout == f"dask-hpc {__version__}\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_scripts_are_valid_bash(run_cmd, name: str) -> None:
    run_cmd(["bash", "-n", str(GOLDEN / f"{name}.sh")], timeout=10).check()


def test_job_output_file_is_executable(invoke, tmp_path: Path) -> None:
    out = tmp_path / "job.sh"
    result = invoke(
        "job",
        "--site",
        "polaris",
        "--nodes",
        "1",
        "--account",
        "proj",
        "--output",
        str(out),
        "--",
        "python",
        "x.py",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert out.stat().st_mode & 0o111
    text = out.read_text()
    assert "dask_hpc_image=$(readlink -e -- dask-hpc-polaris.sif)" in text  # settled once
    assert (
        "mpiexec -n 4 --ppn 4 --depth=8 --cpu-bind depth apptainer exec --nv "
        '${dask_hpc_binds:+--bind "$dask_hpc_binds"} "$dask_hpc_image" start-cluster gpu 4' in text
    )


@pytest.mark.slurm
@pytest.mark.apptainer
@pytest.mark.timeout(900)
def test_generated_slurm_script_runs_on_slurm(
    invoke, slurm_cluster, cluster_env, local_image: Path, image_keys, tmp_path: Path
) -> None:
    """The deepops (Slurm) script, submitted for real: the image verified with the site key
    once, then srun starts one container per rank."""
    pi = tmp_path / "pi.py"  # under /tmp: visible inside Apptainer's root filesystem
    shutil.copy(REPO / "examples" / "pi.py", pi)
    result = invoke(
        "job",
        "--site",
        "deepops",
        "--nodes",
        "1",
        "--workers-per-node",
        "2",
        "--worker-type",
        "cpu",
        "--image",
        str(local_image),
        "--walltime",
        "5",
        "--image-key",
        str(image_keys.public),
        "--",
        "python",
        str(pi),
    )
    assert result.returncode == 0, result.stderr
    script = result.stdout
    settle = f"dask_hpc_image=$(readlink -e -- {local_image})"
    check = f"dask_hpc_key={image_keys.public}"
    assert script.index(settle) < script.index(check) < script.index("\nsrun "), script
    assert 'apptainer verify --key "$dask_hpc_key" "$dask_hpc_image"' in script
    assert (
        "srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --no-kill "
        '--kill-on-bad-exit=0 apptainer exec --nv ${dask_hpc_binds:+--bind "$dask_hpc_binds"} '
        '"$dask_hpc_image" '
        f"start-cluster cpu 2 --site deepops -- python {pi}" in script
    )
    env = {**cluster_env, **slurm_cluster.env}
    job = slurm_cluster.sbatch(script, env=env, cwd=tmp_path)
    state, code = slurm_cluster.wait_job(job, timeout=240)
    output = slurm_cluster.job_output(job)
    assert (state, code) == ("COMPLETED", 0), output
    assert re.search(r"pi ~= 3\.1\d+ .* on 2 worker\(s\) using numpy", output), output


@pytest.mark.slurm
@pytest.mark.apptainer
@pytest.mark.timeout(900)
def test_a_relative_image_runs_once_its_recorded_sha256_matches(
    invoke, slurm_cluster, cluster_env, local_image: Path, tmp_path: Path
) -> None:
    """No site key: the job resolves the image's relative path in its own directory, checks
    the sha256 `invoke build` recorded beside it, and srun's ranks run that path."""
    assert (local_image.parent / f"{local_image.name}.sha256").is_file()
    result = invoke(
        "job",
        "--site",
        "deepops",
        "--nodes",
        "1",
        "--workers-per-node",
        "1",
        "--worker-type",
        "cpu",
        "--image",
        local_image.name,
        "--walltime",
        "5",
        "--",
        "python",
        "-c",
        "print(6*7)",
    )
    assert result.returncode == 0, result.stderr
    assert "apptainer verify" not in result.stdout  # no key: the digest alone
    job = slurm_cluster.sbatch(
        result.stdout, env={**cluster_env, **slurm_cluster.env}, cwd=local_image.parent
    )
    state = slurm_cluster.wait_job(job, timeout=240)
    output = slurm_cluster.job_output(job)
    assert state == ("COMPLETED", 0), output
    assert "\n42\n" in output


def test_invoke_job_command_is_shell_quoted(run_cmd) -> None:
    result = run_cmd(
        invoke_argv(
            "job",
            "--site",
            "perlmutter",
            "--nodes",
            "1",
            "--queue",
            "regular",
            "--",
            "python",
            "-c",
            "'print(1)'",
        ),
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "start-cluster gpu 4 --site perlmutter -- python -c 'print(1)'" in result.stdout
