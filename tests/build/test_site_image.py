"""The site's image from dask's configuration, ``hpc.image`` (the Ansible role writes the one in
its shared directory): what ``hpc-job`` runs when ``--image`` names none, under the runtime its
kind implies."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HPC_JOB = [sys.executable, "-m", "dask_hpc.batch"]
DEEPOPS = ["--site", "deepops", "--nodes", "1", "--workers-per-node", "1", "--gpus-per-node",
           "1", "--cpus-per-worker", "1", "--no-verify"]  # fmt: skip


def test_hpc_image_is_the_default_and_its_kind_chooses_the_runtime(run_cmd, tmp_path: Path) -> None:
    kinds = (("dask-hpc.sqsh", "--container-image="), ("dask-hpc.sif", "apptainer exec"))
    for name, launch in kinds:
        image = tmp_path / name
        image.write_text("")
        env = {**os.environ, "DASK_HPC__IMAGE": str(image)}
        result = run_cmd([*HPC_JOB, *DEEPOPS, "--", "true"], timeout=60, env=env)
        assert result.returncode == 0, result.stderr
        assert f"dask_hpc_image=$(readlink -e -- {image})" in result.stdout, result.stdout
        assert launch in result.stdout.splitlines()[-1], result.stdout
    given = tmp_path / "mine.sqsh"  # --image names another: it wins
    given.write_text("")
    env = {**os.environ, "DASK_HPC__IMAGE": str(tmp_path / "dask-hpc.sif")}
    result = run_cmd([*HPC_JOB, *DEEPOPS, "--image", str(given), "--", "true"], timeout=60, env=env)
    assert result.returncode == 0 and f"readlink -e -- {given})" in result.stdout, result.stderr


def test_a_runtime_or_image_group_the_site_lacks_is_one_line(run_cmd, tmp_path: Path) -> None:
    polaris = ["--site", "polaris", "--nodes", "1", "--account", "p"]
    cases = (
        (["--runtime", "pyxis"], "site polaris has no container runtime 'pyxis'", "use apptainer"),
        (["--image-group", "no-such-group-x"], "no group no-such-group-x here", "id -Gn"),
    )
    for options, problem, fix in cases:
        result = run_cmd([*HPC_JOB, *polaris, *options, "--", "true"], timeout=60)
        assert result.returncode == 2 and result.stdout == "", result
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert problem in result.stderr and fix in result.stderr, result.stderr
