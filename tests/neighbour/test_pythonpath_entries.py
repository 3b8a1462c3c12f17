"""An empty ``PYTHONPATH`` entry (``export PYTHONPATH=$PYTHONPATH:$HOME/lib`` with it unset)
names the working directory, before the standard library: modules the other user planted in
the project directory a job starts in ran as the owner (issue 43, item 4).

Before (00a0f72): ``import_path.settle`` kept the entry as "named by the user", and the console
script imported ``argparse``, ``json`` and ``tornado`` before it ran: the planted copies ran in
start-cluster, its scheduler and its workers. Now the console scripts import nothing but
built-in and frozen modules before ``guard.search_paths`` drops the entry (one line says so),
and job scripts drop it in the shell before Python starts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from harness.neighbour import Neighbour
from neighbour_support import QUIET, neighbour_result, probe_command
from support import REPO, start_cluster
from test_import_path import PLANTED, ran

from dask_hpc.batch import script

# What our CLI and a worker's task import, each leaving a mark when it runs; tornado as a
# package. Not what Python imports before any code of ours (pip's script's `re`, site's .pth
# files, the `dask_hpc` package itself): a job script keeps those out (the second test).
EARLY = ("argparse", "json", "shlex", "colorsys", "tornado/__init__")
BEFORE_OURS = ("re", "dask_hpc/__init__", "encodings/__init__")


def plant(directory: str, names: tuple[str, ...]) -> None:
    marks = Path(directory, "marks")
    marks.mkdir(mode=0o777)
    for name in names:
        path = Path(directory, f"{name}.py")
        path.parent.mkdir(mode=0o777, exist_ok=True)
        path.write_text(PLANTED.format(marks=str(marks), mark=name.replace("/", ".")))


def with_empty_entry(env: dict[str, str], lib: Path) -> dict[str, str]:
    """``export PYTHONPATH=$PYTHONPATH:LIB`` with PYTHONPATH unset."""
    return {**env, "PYTHONPATH": f":{lib}"}


def owners_lib(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    (lib / "owners_helper.py").write_text("VALUE = 42\n")
    return lib


def test_the_console_script_leaves_the_empty_entry_out(
    neighbour: Neighbour, owner_env: dict[str, str], project: Path, run_cmd, tmp_path: Path,
) -> None:
    neighbour.run(plant, str(project), EARLY)
    lib = owners_lib(tmp_path)
    argv = [*start_cluster(), "cpu", "1", *QUIET, *probe_command()]
    result = run_cmd(argv, env=with_empty_entry(owner_env, lib), cwd=project, timeout=150)
    assert ran(project) == [], result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    said = [x for x in result.stderr.splitlines() if "PYTHONPATH: left out" in x]
    assert len(said) == 1 and "an empty entry (the working directory)" in said[0], said
    seen = neighbour_result(result.stdout)
    for where in [*seen["workers"].values(), seen["scheduler"]]:
        assert str(project) not in where["sys_path"], where
        assert str(lib) in where["sys_path"], where  # the owner's own entry stays
        assert not where["colorsys"].startswith(str(project)), where


@pytest.mark.slurm
def test_a_job_script_drops_it_before_python_starts(
    slurm_cluster, neighbour: Neighbour, owner_env: dict[str, str], project: Path,
    tmp_path: Path,
) -> None:
    """Submitted with sbatch (``--export=ALL``, Slurm's default, hands the submitting shell's
    PYTHONPATH to the job) from the project directory: even what Python imports before any
    code of ours (``re``, ``encodings``, a package named ``dask_hpc``) never runs."""
    neighbour.run(plant, str(project), (*EARLY, *BEFORE_OURS))
    text = script.render(
        script.JobRequest(
            site="generic", batch_system="slurm", nodes=1, workers_per_node=1,
            worker_type="cpu", cpus_per_worker=1, walltime="5", python=sys.executable,
            command=[sys.executable, str(REPO / "tests" / "jobs" / "neighbour_probe.py")],
            cluster_args=QUIET,
        )
    )
    lib = owners_lib(tmp_path)
    env = with_empty_entry({**owner_env, **slurm_cluster.env}, lib)
    job = slurm_cluster.sbatch(text, env=env, cwd=project)
    state = slurm_cluster.wait_job(job, timeout=240)
    output = slurm_cluster.job_output(job)
    assert ran(project) == [], output
    assert state == ("COMPLETED", 0), output
    assert "dask-hpc: PYTHONPATH: left out an empty entry (the working directory)" in output
    seen = neighbour_result(output)
    for where in [*seen["workers"].values(), seen["scheduler"]]:
        assert str(project) not in where["sys_path"], where
        assert str(lib) in where["sys_path"], where
    assert os.stat(project).st_mode & 0o777 == 0o777  # the attack's premise held
