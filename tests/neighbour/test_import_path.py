"""Modules another user plants in the directory a job starts in never run as the owner.

Before (85c333f): job scripts without an image ran ``python3 -m dask_hpc`` after ``cd`` to the
submit directory, and ``python -m`` puts the working directory first on ``sys.path``: the other
user's ``argparse.py`` ran as the owner in every rank, their ``colorsys.py`` in a worker;
``entrypoints/start-cluster`` did the same. Now every way a rank starts leaves that directory
off ``sys.path`` when another user can write it (``dask_hpc.guard.import_path``), and each is run
here from a project directory (mode 0777, not sticky) the other user filled first: the console
script under each launcher, ``PYTHON -P -m dask_hpc`` (HPCCluster's jobs), Python 3.10's
bootstrap (``-c``), the entrypoint script, and a rendered job script submitted to Slurm.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from harness.neighbour import Neighbour
from harness.venvs import venv_over_this_python
from neighbour_support import QUIET, neighbour_result, probe_command
from support import REPO, start_cluster

from dask_hpc.batch import script
from dask_hpc.guard import import_path

MARKS = "marks"
PLANTED = "import os, pathlib\npathlib.Path({marks!r}, {mark!r} + '-%d' % os.getuid()).touch()\n"
# What Python, our CLI, multiprocessing and a worker's task import early, each a module of
# the other user's that leaves a mark when it runs; and a package named as ours.
MODULES = ("argparse", "colorsys", "runpy", "json", "shlex", "dask_hpc/__init__")


def plant(directory: str) -> None:
    """As the other user: modules of the names the owner's processes import, in ``directory``."""
    marks = Path(directory, MARKS)
    marks.mkdir(mode=0o777)
    for name in MODULES:
        path = Path(directory, f"{name}.py")
        path.parent.mkdir(mode=0o777, exist_ok=True)
        path.write_text(PLANTED.format(marks=str(marks), mark=name.replace("/", ".")))


def ran(project: Path) -> list[str]:
    return sorted(p.name for p in (project / MARKS).iterdir())


def assert_nothing_planted_ran(project: Path, result, probe: bool = True) -> None:  # noqa: ANN001
    assert ran(project) == [], result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    if probe:
        seen = neighbour_result(result.stdout)
        for where in [*seen["workers"].values(), seen["scheduler"]]:
            assert str(project) not in where["sys_path"], where
            assert not where["colorsys"].startswith(str(project)), where
    # the one line that says why the working directory is not on the workers' path
    assert f"the working directory {project} is not on the workers' module path" in (
        result.stderr
    )


def test_the_console_script_under_each_launcher(
    run_owner, neighbour: Neighbour, owner_env: dict[str, str], project: Path, run_cmd,
    launcher: str, request: pytest.FixtureRequest,
) -> None:
    """``start-cluster`` (what job scripts run, in the image or on the job's PATH)."""
    neighbour.run(plant, str(project))
    slurm = request.getfixturevalue("slurm_cluster") if launcher == "srun" else None
    from neighbour_support import launch

    argv = [*launch(launcher, slurm), *start_cluster(), "cpu", "1", *QUIET, *probe_command()]
    env = {**owner_env, **(slurm.env if slurm else {})}
    result = run_cmd(argv, env=env, cwd=project, timeout=150)
    assert_nothing_planted_ran(project, result)


@pytest.mark.parametrize("form", ["python -P -m", "python -c bootstrap", "entrypoint"])
def test_every_other_way_a_rank_starts(
    form: str, neighbour: Neighbour, owner_env: dict[str, str], project: Path, run_cmd,
    tmp_path: Path,
) -> None:
    """``PYTHON -P -m dask_hpc`` (HPCCluster's jobs), the bootstrap of a Python that may be
    3.10 (an interpreter other than this one), and ``entrypoints/start-cluster``."""
    neighbour.run(plant, str(project))
    if form == "python -P -m":
        head = import_path.python_argv("dask_hpc")
        assert head[1:3] == ["-P", "-m"]
    elif form == "python -c bootstrap":
        # this Python by another name: its version unknown
        other = venv_over_this_python(tmp_path / "env", pip=False).with_name("python3")
        head = import_path.python_argv("dask_hpc", str(other))
        assert head[1] == "-c"
    else:
        head = [str(REPO / "entrypoints" / "start-cluster")]
    argv = [*head, "cpu", "1", *QUIET, *probe_command()]
    result = run_cmd(argv, env=owner_env, cwd=project, timeout=150)
    assert_nothing_planted_ran(project, result)


@pytest.mark.slurm
@pytest.mark.parametrize("python", [None, sys.executable], ids=["start-cluster", "python"])
def test_a_job_script_submitted_from_a_project_directory(
    python: str | None, slurm_cluster, neighbour: Neighbour, owner_env: dict[str, str],
    project: Path,
) -> None:
    """The job script ``invoke job`` and ``hpc-cluster script`` print for a site without an
    image, submitted with sbatch from the project directory (the job starts there)."""
    neighbour.run(plant, str(project))
    text = script.render(
        script.JobRequest(
            site="generic", batch_system="slurm", nodes=1, workers_per_node=1,
            worker_type="cpu", cpus_per_worker=1, walltime="5", python=python,
            command=[sys.executable, str(REPO / "tests" / "jobs" / "neighbour_probe.py")],
            cluster_args=QUIET,
        )
    )
    env = {**owner_env, **slurm_cluster.env}
    job = slurm_cluster.sbatch(text, env=env, cwd=project)
    state = slurm_cluster.wait_job(job, timeout=240)
    output = slurm_cluster.job_output(job)
    assert ran(project) == [], output
    assert state == ("COMPLETED", 0), output
    seen = neighbour_result(output)
    for where in [*seen["workers"].values(), seen["scheduler"]]:
        assert str(project) not in where["sys_path"], where


def test_a_directory_only_the_owner_writes_stays_on_the_workers_path(
    owner_env: dict[str, str], run_cmd, tmp_path: Path,
) -> None:
    """The other side: the owner's own module beside the job script imports in a worker (a
    task that is a function of it), as under ``python -m`` and dask-jobqueue."""
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "helpers.py").write_text("def square(x):\n    return x * x\n")
    (work / "job.py").write_text(
        "from distributed import Client\nfrom helpers import square\n"
        "client = Client()\nprint('SUM', sum(client.gather(client.map(square, range(10)))))\n"
    )
    argv = [*start_cluster(), "cpu", "1", *QUIET, "--", sys.executable, "job.py"]
    result = run_cmd(argv, env=owner_env, cwd=work, timeout=150)
    assert result.returncode == 0, result.stderr
    assert "SUM 285" in result.stdout
    assert "module path" not in result.stderr
    assert os.stat(work).st_mode & 0o777 == 0o700


def plant_program(directory: str, name: str) -> None:
    """As the other user: a program of the name the owner's cluster looks up on PATH."""
    path = Path(directory, name)
    path.write_text("#!/bin/sh\ntouch \"$(dirname \"$0\")/ran-$(id -u)\"\n")
    path.chmod(0o755)


def test_a_program_on_path_others_can_change_is_never_found(
    neighbour: Neighbour, owner_env: dict[str, str], project: Path, run_cmd, tmp_path: Path,
) -> None:
    """``--jupyter`` runs JupyterLab from this Python's environment, else from PATH: a
    ``jupyter`` the other user put in a directory of PATH they can write (``.`` in a submit
    directory) is never run: the entry leaves PATH first (``search_paths``, one line);
    ``import_path.program`` still refuses such a program in one line where it is found."""
    neighbour.run(plant_program, str(project), "jupyter")
    env = {**owner_env, "PATH": f"{project}:{owner_env['PATH']}"}
    # a Python whose environment has no jupyter
    python = venv_over_this_python(tmp_path / "env", pip=False).with_name("python3")
    argv = [str(python), "-P", "-m", "dask_hpc", "cpu", "1", *QUIET, "--jupyter", "--dry-run"]
    result = run_cmd(argv, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"PATH: left out {project} can be written by other users" in result.stdout
    assert "Traceback" not in result.stderr
    assert not list(project.glob("ran-*"))
