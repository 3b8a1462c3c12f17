"""A DeepOps job under Pyxis and Enroot, for real (issue 45): ``srun --container-image``.

Real parts: Enroot 4.1.2 and Pyxis 0.11.1 as tests/setup/enroot.sh builds them, Pyxis loaded
through the private Slurm's own plugstack.conf (tests/harness/slurm.py), the job script
rendered as ``invoke job`` renders it for DeepOps (runtime: the site's, Pyxis), a squashfs made
from a SIF by ``dask_hpc.images_enroot``, the cluster started by start-cluster inside the
container, COMMAND's result read back, nothing left running.

The image is small on purpose (a full one is the 454 s ``local_image``): its root file system
is a SIF of a merged-/usr skeleton whose ``%environment`` puts the test's Python first on PATH;
the job mounts the host's ``/usr`` and that Python (``JobRequest.binds``) where a site image
has them in itself. This kernel runs every step (unprivileged user namespaces: Enroot's
``create`` and ``start`` work as root and as the second user), so nothing here is emulated.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from containers_support import (
    ENROOT,
    PYTHON_PREFIX,
    REPO,
    need_enroot,
    short_root,
    tiny_sif,
    two_cpu_ranks,
    user_home,
    user_job,
)
from harness.neighbour import USER_PYTHON, runs_user_python
from harness.slurm import SlurmCluster

from dask_hpc import images_enroot
from dask_hpc.batch import script

pytestmark = pytest.mark.slurm


@contextmanager
def pyxis_cluster(runtime: Path) -> Iterator[SlurmCluster]:
    """A one-node private Slurm with Pyxis in its plugstack.conf (its runtime directory
    ``runtime``), Enroot on slurmd's PATH."""
    need_enroot()
    plugin = ENROOT / "pyxis" / "spank_pyxis.so"
    cluster = SlurmCluster(
        short_root(),
        nodes=1,
        cpus=4,
        plugstack=f"required {plugin} runtime_path={runtime}",
        daemon_env={"PATH": f"{ENROOT / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop_and_remove()


@pytest.fixture
def pyxis_slurm(tmp_path: Path) -> Iterator[SlurmCluster]:
    """:func:`pyxis_cluster`, its runtime directory in the test's own."""
    with pyxis_cluster(tmp_path / "pyxis") as cluster:
        yield cluster


def test_a_deepops_job_runs_its_cluster_under_pyxis(
    pyxis_slurm: SlurmCluster, tagged_env: dict[str, str], tmp_path: Path, monkeypatch
) -> None:  # noqa: ANN001
    """The DeepOps script, its site's runtime Pyxis: the squashfs checked, then two workers in
    one container, COMMAND's sum read back; the container's file system removed after."""
    t0 = time.monotonic()
    images = tmp_path / "images"
    images.mkdir(mode=0o755)
    sqsh = images_enroot.convert(tiny_sif(images))
    converted = time.monotonic() - t0
    assert sqsh.name == "dask-hpc-deepops.sqsh"
    assert (images / "dask-hpc-deepops.sqsh.sha256").read_text().split()[1] == sqsh.name
    listing = subprocess.run(
        ["unsquashfs", "-cat", str(sqsh), "etc/environment"], capture_output=True, text=True
    )
    assert listing.stdout.startswith(f"PATH={PYTHON_PREFIX}/bin:"), listing

    jobdir, scheduler, xdg = tmp_path / "job", tmp_path / "sched", tmp_path / "xdg"
    login_venv = tmp_path / "login-venv" / "bin"
    for d in (jobdir, scheduler, xdg, login_venv):
        d.mkdir(mode=0o700, parents=True)
    decoy = login_venv / "start-cluster"
    decoy.write_text("#!/bin/sh\necho 'DECOY: the node's start-cluster ran' >&2\nexit 3\n")
    decoy.chmod(0o755)
    monkeypatch.setenv("SLURM_CONF", pyxis_slurm.env["SLURM_CONF"])  # sinfo: the node's CPUs
    code = (  # in the container: its /etc/environment (the host's is empty), the cluster's sum
        "from dask.distributed import Client; c = Client(); "
        "print('IMAGE', open('/etc/environment').readline().strip()); "
        "print('SUM', c.submit(sum, [20, 22]).result(), "
        "len(c.sync(c.scheduler.identity)['workers']))"
    )
    text = two_cpu_ranks("deepops", str(sqsh.with_suffix("")) + ".sqsh", scheduler, code)
    launch = text.strip().splitlines()[-1]
    assert launch.startswith("srun ") and '--container-image="$dask_hpc_image"' in launch
    assert "--no-container-remap-root" in launch and "apptainer" not in launch
    # Enroot's data, cache and runtime directories: the job's own, private (XDG_*: Pyxis
    # passes them, unlike ENROOT_*_PATH, which only the node's enroot.conf sets)
    env = {
        **tagged_env,
        **pyxis_slurm.env,
        # the submitting shell's PATH has a start-cluster of its own (the venv hpc-job ran
        # from), which srun resolves to a full path: not in the image, and never to run there;
        # the ranks find the image's in its PATH (its /etc/environment)
        "PATH": f"{login_venv}:/usr/local/bin:/usr/bin:/bin",
        "XDG_DATA_HOME": str(xdg / "data"),
        "XDG_CACHE_HOME": str(xdg / "cache"),
        "XDG_RUNTIME_DIR": str(xdg / "run"),
    }
    job = pyxis_slurm.sbatch(text, env=env, cwd=jobdir)
    state = pyxis_slurm.wait_job(job, timeout=180)
    output = pyxis_slurm.job_output(job)
    assert state == ("COMPLETED", 0), output + pyxis_slurm.log("node1")[-3000:]
    assert "SUM 42 2" in output, output
    assert f"IMAGE PATH={PYTHON_PREFIX}/bin:" in output, output  # COMMAND ran in the image
    assert "Traceback" not in output, output
    for sub in ("data", "cache", "run"):
        made = xdg / sub / "enroot"
        assert made.stat().st_mode & 0o777 == 0o700, made
    assert not list((xdg / "data" / "enroot").iterdir())  # the container's rootfs removed
    print(f"squashfs from SIF: {converted:.1f} s; job: {time.monotonic() - t0 - converted:.1f} s")


def test_a_second_users_job_runs_its_cluster_under_pyxis(
    tagged_env: dict[str, str], shared: Path
) -> None:
    """The DeepOps job of a user who is not root: Enroot maps that user alone, so the node's
    /tmp, which the job mounts as the ranks' local directory, shows the overflow id (nobody)
    inside. start-cluster takes the node's own sticky /tmp as root's there
    (``guard.namespaces``): before, every such job stopped, "local directory /tmp belongs to
    nobody". Two workers, COMMAND's sum, as the user, the container removed after."""
    user = runs_user_python()
    images = shared / "images"
    images.mkdir(mode=0o755)
    sqsh = images_enroot.convert(tiny_sif(images, python=USER_PYTHON, pythonpath=str(REPO / "src")))
    home = user_home(shared, user)
    xdg = home / "xdg"
    xdg.mkdir(mode=0o700)
    os.chown(xdg, user.pw_uid, user.pw_gid)
    code = (  # in the container: the user's id, the node's /tmp as it shows there; the sum
        "import os; from dask.distributed import Client; c = Client(); t = os.stat('/tmp'); "
        "print('IN', os.getuid(), oct(t.st_mode & 0o7777), t.st_uid); "
        "print('SUM', c.submit(sum, [20, 22]).result(), "
        "len(c.sync(c.scheduler.identity)['workers']))"
    )
    text = two_cpu_ranks("deepops", str(sqsh), home / "sched", code, python=USER_PYTHON)
    runtime = shared / "pyxis"
    runtime.mkdir(mode=0o755)
    with pyxis_cluster(runtime) as cluster:
        env = {
            **tagged_env,
            **cluster.env,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "USER": user.pw_name,
            "HOME": str(home),
            "XDG_DATA_HOME": str(xdg / "data"),
            "XDG_CACHE_HOME": str(xdg / "cache"),
            "XDG_RUNTIME_DIR": str(xdg / "run"),
        }
        output = user_job(cluster, user, text, env)
    assert f"IN {user.pw_uid} 0o1777 65534" in output, output  # the node's /tmp, as nobody's
    assert "SUM 42 2" in output, output
    assert "Traceback" not in output and "belongs to nobody, who" not in output, output
    assert not list((xdg / "data" / "enroot").iterdir())  # the container's rootfs removed


def test_a_sif_named_for_pyxis_is_refused_in_one_line(tmp_path: Path) -> None:
    """``runtime="pyxis"`` and a SIF: one line naming the squashfs, before any job."""
    with pytest.raises(script.UsageError, match="is a SIF, which Pyxis cannot run"):
        script.render(
            script.JobRequest(
                site="deepops", nodes=1, workers_per_node=1, worker_type="cpu",
                cpus_per_worker=1, image=str(tmp_path / "x.sif"), runtime="pyxis",
                command=["true"],
            )
        )  # fmt: skip
