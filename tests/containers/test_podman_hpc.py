"""A Perlmutter job under podman-hpc, for real (issue 45): ``podman-hpc load``, ``migrate`` and
``run``.

Real parts: podman 4.3.1 (Debian's) and podman-hpc 1.1.4 (NERSC's wrapper) as
tests/setup/podman.sh installs them, a private Slurm (tests/harness/slurm.py), the job script
rendered as ``invoke job`` renders it for Perlmutter (runtime: the site's, podman-hpc), an OCI
archive made from a SIF by ``dask_hpc.images_podman``, checked by its recorded sha256, loaded
into the job's private store and migrated there (squashed, mounted by squashfuse on the node;
tests/setup/podman.sh builds the static mksquashfs a site configures), two ranks each in its
own ``podman-hpc run``, start-cluster inside
them, COMMAND's result read back, nothing left running or on disk.

The image is small on purpose (as test_pyxis.py's): a SIF of a merged-/usr skeleton whose
``%environment`` puts the test's Python first on PATH; the job mounts the host's ``/usr`` and
that Python (``JobRequest.binds``) where a site image has them in itself. The node's podman
configuration (runc, rlimits) and what this machine refuses are in podman_support.py: nothing
here is emulated.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from containers_support import (
    PYTHON_PREFIX,
    REPO,
    short_root,
    submit_as,
    tiny_sif,
    two_cpu_ranks,
    user_home,
    user_job,
)
from harness.neighbour import USER_PYTHON, runs_user_python
from harness.slurm import SlurmCluster
from harness.waiting import wait_for
from podman_support import (
    need_podman,
    podman_env,
    podman_processes,
    rank_stores,
    rootless_leftovers,
)

from dask_hpc import images_podman
from dask_hpc.batch import script

# One after another: each job's COMMAND and the cancelled job's checks read every rank storage
# on this node (/tmp/dask-hpc-podman_*), another test's included.
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("tests/containers/test_podman_hpc.py")]


@pytest.fixture
def perlmutter_slurm(tmp_path: Path):  # noqa: ANN201
    """A one-node private Slurm with Perlmutter's --constraint=gpu feature."""
    need_podman()
    # KillWait as Slurm's default (30 s), not the harness's 5 s: a rank's stop and cleanup after
    # scancel took longer than 5 s under CI's load (its storage was left when SIGKILL came)
    cluster = SlurmCluster(short_root(), nodes=1, cpus=4, features="gpu", kill_wait=30)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop_and_remove()


def two_ranks_job(archive: Path, tmp_path: Path, code: str) -> str:
    """The Perlmutter script of one node, two CPU ranks in podman-hpc, COMMAND ``python -c
    code``; the job's directory ``tmp_path/job`` and scheduler directory made (0700)."""
    scheduler = tmp_path / "sched"
    for d in (tmp_path / "job", scheduler):
        d.mkdir(mode=0o700)
    return two_cpu_ranks("perlmutter", str(archive), scheduler, code)


def test_a_perlmutter_job_runs_its_cluster_under_podman_hpc(
    perlmutter_slurm: SlurmCluster, tagged_env: dict[str, str], tmp_path: Path
) -> None:
    """The Perlmutter script, its site's runtime podman-hpc: the OCI archive checked, loaded
    into the job's private store, two ranks each in a container, COMMAND's sum read back; the
    containers, podman's processes, the store and each rank's storage gone after."""
    t0 = time.monotonic()
    images = tmp_path / "images"
    images.mkdir(mode=0o755)
    sif = tiny_sif(images)
    archive = images_podman.convert(sif, images / "dask-hpc-perlmutter.oci.tar")
    again = images_podman.convert(sif, images / "again.oci.tar")
    converted = time.monotonic() - t0
    digest = (images / "dask-hpc-perlmutter.oci.tar.sha256").read_text().split()
    assert digest[1] == archive.name
    assert Path(f"{again}.sha256").read_text().split()[0] == digest[0]  # the same image
    image_id = images_podman.image_id(archive)

    jobdir = tmp_path / "job"
    code = (  # in the container: podman's mark, the image's PATH, a read-only root, the sum
        "import glob, os, stat; from dask.distributed import Client; c = Client(); "
        "print('IN', os.environ.get('container'), os.environ['PATH'].split(':')[0]); "
        "print('RO', not os.access('/', os.W_OK)); "
        "p = glob.glob(os.path.abspath('.dask-hpc-podman_*')) + ['/tmp']; "
        "s = [os.stat(d) for d in p]; "
        "[print('STORE', d, oct(stat.S_IMODE(x.st_mode)), x.st_uid) for d, x in zip(p, s)]; "
        "j = glob.glob('.dask-hpc-podman_*')[0]; "
        "print('MIGRATED', len(glob.glob(j + '/squash/overlay/l/*.squash')), "
        "os.path.exists(j + '/load')); "
        "print('SUM', c.submit(sum, [20, 22]).result(), "
        "len(c.sync(c.scheduler.identity)['workers']))"
    )
    text = two_ranks_job(archive, tmp_path, code)
    launch = text.strip().splitlines()[-1]
    assert launch.startswith("srun ") and 'bash "$dask_hpc_podman/rank"' in launch, launch
    assert "apptainer" not in text
    assert "podman-hpc run --name=dask-hpc-rank --rm --read-only --net=host --init" in text
    env = {**tagged_env, **perlmutter_slurm.env, **podman_env(tmp_path)}
    before = rank_stores()  # another test's, on this node
    job = perlmutter_slurm.sbatch(text, env=env, cwd=jobdir)
    state = perlmutter_slurm.wait_job(job, timeout=180)
    output = perlmutter_slurm.job_output(job)
    assert state == ("COMPLETED", 0), output + perlmutter_slurm.log("node1")[-3000:]
    assert "SUM 42 2" in output, output
    assert f"IN podman {PYTHON_PREFIX}/bin" in output, output  # COMMAND ran in the image
    assert "RO True" in output, output
    # podman-hpc migrate: the image's one layer squashed into the job's store, which the ranks
    # ran from; the loaded copy gone before they started
    assert "MIGRATED 1 False" in output, output
    # the job's store while COMMAND ran, and the rank's /tmp (its local directory, a directory
    # of its own storage, not the node's /tmp): 0700, the user's
    stores = [line.split()[1:] for line in output.splitlines() if line.startswith("STORE ")]
    assert len(stores) == 2 and {(m, u) for _, m, u in stores} == {("0o700", str(os.getuid()))}
    paths = [path for path, _, _ in stores if path != "/tmp"]
    assert "Traceback" not in output, output
    assert f"Loaded image: sha256:{image_id}" not in output  # load's words stay in the job
    assert not list(jobdir.glob(".dask-hpc-podman_*")), list(jobdir.iterdir())
    assert [p for p in paths if os.path.exists(p)] == []  # the store, the ranks' storage
    assert rank_stores() - before == set()  # nor a mount in them
    assert str(jobdir) not in Path("/proc/self/mounts").read_text()  # no squashfuse left
    # no podman, conmon, fuse-overlayfs, rank script (the daemons of the test's Slurm stay)
    assert podman_processes(str(jobdir), "/tmp/dask-hpc-podman_") == []
    print(f"OCI archive from SIF, twice: {converted:.1f} s; job: {time.monotonic() - t0:.1f} s")


def test_a_second_users_job_runs_its_cluster_under_rootless_podman_hpc(
    perlmutter_slurm: SlurmCluster, tagged_env: dict[str, str], shared: Path
) -> None:
    """The Perlmutter job of a user who is not root, as NERSC's users run podman-hpc: rootless,
    with subordinate ids. The image loaded, migrated and run in that user's own user namespace,
    COMMAND's sum read back, nothing of the job left. Each rank's local directory is its own:
    inside a rootless container the node's /tmp shows the overflow id (65534), which
    start-cluster cannot tell from another user's and refused (before, the job mounted it)."""
    user = runs_user_python()
    images = shared / "images"
    images.mkdir(mode=0o755)
    sif = tiny_sif(images, python=USER_PYTHON, pythonpath=str(REPO / "src"))
    archive = images_podman.convert(sif, images / "dask-hpc-perlmutter.oci.tar")
    home = user_home(shared, user)
    code = (  # in the container: the user's id there, its /tmp and the node's /usr; the sum
        "import os; from dask.distributed import Client; c = Client(); "
        "t, u = os.stat('/tmp'), os.stat('/usr'); "
        "print('IN', os.getuid(), oct(t.st_mode & 0o777), t.st_uid, u.st_uid); "
        "print('SUM', c.submit(sum, [20, 22]).result(), "
        "len(c.sync(c.scheduler.identity)['workers']))"
    )
    text = two_cpu_ranks("perlmutter", str(archive), home / "sched", code, python=USER_PYTHON)
    env = {**tagged_env, **podman_env(shared), "USER": user.pw_name, "HOME": str(home)}
    before = rank_stores()
    output = user_job(perlmutter_slurm, user, text, env)
    # root in the user's own namespace; /tmp the rank's own (0700, the user's: 0 there); the
    # node's /usr, root's, shows the overflow id
    assert "IN 0 0o700 0 65534" in output, output
    assert "SUM 42 2" in output, output
    assert "Traceback" not in output, output
    assert not list(home.glob(".dask-hpc-podman_*")), list(home.iterdir())
    assert rank_stores() - before == set()  # no rank storage, nor a mount in it
    assert str(home) not in Path("/proc/self/mounts").read_text()  # no squashfuse left
    assert podman_processes(str(home), "/tmp/dask-hpc-podman_") == []
    # no pause process left (one per `podman-hpc unshare` before), no default directory used
    assert rootless_leftovers(user.pw_uid) == []


@pytest.mark.parametrize("who", ["root", "a second user"])
def test_a_cancelled_job_leaves_no_container_mount_or_store(
    perlmutter_slurm: SlurmCluster, tagged_env: dict[str, str], tmp_path: Path, who: str
) -> None:
    """scancel while COMMAND runs (what the walltime's end does too: SIGTERM to the batch script
    and every rank, SIGKILL after KillWait): each rank's container stops, podman's processes
    end, and nothing is left on the node: no mount, no rank storage, no job store; for root's
    job and for a second user's, rootless. (Before, the batch script's EXIT trap removed the
    job's store under the stopping containers: their overlays stayed mounted, fuse-overlayfs
    running.)"""
    code = (
        "import sys, time; from dask.distributed import Client; c = Client(); "
        "print('READY', len(c.sync(c.scheduler.identity)['workers']), flush=True); "
        "time.sleep(600)"
    )
    env = {**tagged_env, **perlmutter_slurm.env}
    before = rank_stores()  # another test's, on this node
    with ExitStack() as stack:
        if who == "root":
            images = tmp_path / "images"
            images.mkdir(mode=0o755)
            sif = tiny_sif(images)
            archive = images_podman.convert(sif, images / "dask-hpc-perlmutter.oci.tar")
            jobdir = tmp_path / "job"
            env.update(podman_env(tmp_path))
            text = two_ranks_job(archive, tmp_path, code)
            job = perlmutter_slurm.sbatch(text, env=env, cwd=jobdir)
            output = perlmutter_slurm.root / "jobs" / f"{job}.out"
        else:
            user = runs_user_python()
            place = Path(stack.enter_context(tempfile.TemporaryDirectory(dir="/tmp")))
            place.chmod(0o755)
            images = place / "images"
            images.mkdir(mode=0o755)
            sif = tiny_sif(images, python=USER_PYTHON, pythonpath=str(REPO / "src"))
            archive = images_podman.convert(sif, images / "dask-hpc-perlmutter.oci.tar")
            jobdir = user_home(place, user)
            env.update(podman_env(place), USER=user.pw_name, HOME=str(jobdir))
            text = two_cpu_ranks("perlmutter", str(archive), jobdir / "sched", code, USER_PYTHON)
            job = submit_as(perlmutter_slurm, user, text, env)
            output = jobdir / "job.out"
        wait_for(
            lambda: output.exists() and "READY 2" in output.read_text(errors="replace"),
            180,
            what=f"the two workers, COMMAND running: {output}",
        )
        assert len(podman_processes(str(jobdir))) >= 4  # two ranks' scripts and podman runs
        assert rank_stores() - before  # their storage
        perlmutter_slurm.scancel(job)
        state = perlmutter_slurm.wait_job(job, timeout=60)
        text_out = output.read_text(errors="replace")
        assert state[0] == "CANCELLED", text_out
        assert "start-cluster: received signal 15: shutting down" in text_out, text_out
        assert "Traceback" not in text_out and "No such process" not in text_out, text_out
        wait_for(
            lambda: podman_processes(str(jobdir), "/tmp/dask-hpc-podman_") == [],
            30,
            what="no podman, conmon or fuse-overlayfs of the job",
        )
        assert rank_stores() - before == set(), text_out  # no storage, nor a mount in it
        assert not list(jobdir.glob(".dask-hpc-podman_*")), list(jobdir.iterdir())
        assert str(jobdir) not in Path("/proc/self/mounts").read_text()  # no squashfuse left
        if who != "root":  # no pause process (the job store's removal ends its own last)
            wait_for(lambda: rootless_leftovers(user.pw_uid) == [], 10, what="no pause process")


def test_an_image_of_another_runtime_is_refused_in_one_line(tmp_path: Path) -> None:
    """podman-hpc and a SIF or a squashfs: one line naming the OCI archive, before any job."""
    for image in ("x.sif", "x.sqsh"):
        with pytest.raises(script.UsageError, match="which podman-hpc cannot run") as e:
            script.render(
                script.JobRequest(
                    site="perlmutter", nodes=1, workers_per_node=1, worker_type="cpu",
                    cpus_per_worker=1, walltime="10", image=str(tmp_path / image),
                    command=["true"],
                )
            )  # fmt: skip
        assert f"({tmp_path / 'x.oci.tar'})" in str(e.value.args)


def test_a_working_directory_others_can_write_is_refused_before_the_store(
    tmp_path: Path,
) -> None:
    """The job's image store is made in its working directory: one others could rename things
    in (mode 0777, not sticky) is refused in one line, before podman-hpc loads anything."""
    need_podman()
    images = tmp_path / "images"
    images.mkdir(mode=0o755)
    archive = images_podman.convert(tiny_sif(images), images / "dask-hpc-perlmutter.oci.tar")
    text = script.render(
        script.JobRequest(
            site="perlmutter", nodes=1, workers_per_node=1, worker_type="cpu",
            cpus_per_worker=1, walltime="5", image=str(archive), command=["true"],
            env={"DASK_HPC__SCHEDULER_DIRECTORY": str(tmp_path)},
        )
    )  # fmt: skip
    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    setup = text.rstrip().rsplit("\n", 1)[0]  # all but the launch line: no Slurm needed
    ran = subprocess.run(
        ["bash", "-c", setup],
        cwd=open_dir,
        env={**os.environ, **podman_env(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran
    assert f"working directory {open_dir}: {open_dir} can be written by other users" in ran.stderr
    assert "submit from a directory only you can write ($SCRATCH)" in ran.stderr, ran.stderr
    assert list(open_dir.iterdir()) == []  # no store made


def test_an_image_podman_hpc_cannot_migrate_is_refused_in_one_line(tmp_path: Path) -> None:
    """`podman-hpc migrate` fails (here: the site's mksquashfs is missing; podman-hpc 1.1.4 then
    still exits 0): the job says so in one line, exit status 2, before any rank starts, and
    leaves neither its store nor podman's storage behind."""
    need_podman()
    images = tmp_path / "images"
    images.mkdir(mode=0o755)
    archive = images_podman.convert(tiny_sif(images), images / "dask-hpc-perlmutter.oci.tar")
    text = two_ranks_job(archive, tmp_path, "pass")
    setup = text.rstrip().rsplit("\n", 1)[0]  # all but the launch line: no Slurm needed
    jobdir = tmp_path / "job"
    before = rank_stores()
    missing = tmp_path / "no-mksquashfs"
    ran = subprocess.run(
        ["bash", "-c", setup],
        cwd=jobdir,
        env={**os.environ, **podman_env(tmp_path), "PODMANHPC_MKSQUASHFS_BIN": str(missing)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran
    assert f"podman-hpc could not migrate image {archive}:" in ran.stderr, ran.stderr
    assert list(jobdir.iterdir()) == []  # the job's store removed
    assert rank_stores() - before == set()
    assert str(jobdir) not in Path("/proc/self/mounts").read_text()
