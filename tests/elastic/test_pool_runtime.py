"""The container runtime of an elastic cluster's jobs (issue 45): ``hpc-cluster --runtime`` and
``HPCCluster(runtime=)``, as ``hpc-job --runtime``: the site's own by default (DeepOps: Pyxis,
Perlmutter: podman-hpc), another it has when asked, and one it lacks refused in one line
before anything is submitted. The rendered scripts are checked here; tests/containers runs
them under real Pyxis and podman-hpc."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dask_hpc.elastic.cluster import HPCCluster
from dask_hpc.errors import UsageError

HPC_CLUSTER = [sys.executable, "-m", "dask_hpc.elastic"]
PERLMUTTER = ["--site", "perlmutter", "--account", "m1", "--queue", "regular"]


def images(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for kind in ("sif", "sqsh", "oci.tar"):
        made[kind] = tmp_path / f"dask-hpc.{kind}"
        made[kind].write_text("")
    return made


def launch_line(script: str) -> str:
    """The line that starts the ranks (srun's, or podman-hpc's rank script's)."""
    return next(line for line in reversed(script.splitlines()) if "start-cluster" in line)


def test_each_sites_own_runtime_and_another_it_has(run_cmd, tmp_path: Path) -> None:
    image = images(tmp_path)
    cases = (
        (["--site", "deepops", "--image", str(image["sqsh"])], "--container-image="),
        (["--site", "deepops", "--image", str(image["sif"]), "--runtime", "apptainer"],
         "apptainer exec"),
        ([*PERLMUTTER, "--image", str(image["oci.tar"])], "podman-hpc"),
    )  # fmt: skip
    for options, runs in cases:
        argv = [*HPC_CLUSTER, "script", "cpu", *options, "--directory", str(tmp_path / "c")]
        result = run_cmd(argv, timeout=60)
        assert result.returncode == 0, result.stderr
        assert runs in result.stdout, (options, result.stdout[-2000:])
        assert "--join" in launch_line(result.stdout)


def test_a_runtime_the_site_lacks_is_one_line_and_nothing_starts(run_cmd, tmp_path: Path) -> None:
    image = images(tmp_path)
    polaris = ["--site", "polaris", "--account", "p", "--image", str(image["sif"])]
    cases = (
        ([*polaris, "--runtime", "pyxis"], "site polaris has no container runtime 'pyxis'"),
        ([*polaris, "--runtime", "docker"], "argument --runtime: invalid choice: 'docker'"),
        ([*PERLMUTTER, "--image", str(image["sif"])], "is a SIF, which podman-hpc cannot run"),
    )
    for options, problem in cases:
        directory = tmp_path / "never"
        argv = [*HPC_CLUSTER, "script", "cpu", *options, "--directory", str(directory)]
        result = run_cmd(argv, timeout=60)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and problem in lines[0], result.stderr
        assert "Traceback" not in result.stderr and not directory.exists()


def test_hpccluster_takes_the_runtime_for_every_pool(tmp_path: Path) -> None:
    """The keyword argument, as hpc-cluster script settles it (nothing starts); a pool added
    later inherits it, as it inherits the image."""
    image = images(tmp_path)
    probe = HPCCluster.__new__(HPCCluster)
    HPCCluster._settle(
        probe, "cpu", site="deepops", image=str(image["sif"]), runtime="apptainer",
        directory=str(tmp_path / "c"), check_commands=False,
    )  # fmt: skip
    assert "apptainer exec" in launch_line(probe.job_script())
    probe.add_pool("more", "cpu")
    assert probe.pools["more"].runtime == "apptainer"
    assert "apptainer exec" in launch_line(probe.job_script("more"))
    with pytest.raises(UsageError, match="site deepops has no container runtime 'podman-hpc'"):
        probe.add_pool("other", "cpu", runtime="podman-hpc")
