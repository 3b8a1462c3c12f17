"""What the container runtime tests share: the Enroot and Pyxis that tests/setup/enroot.sh
builds, and a small SIF (a full site image is the 454 s ``local_image``)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from harness.slurm import SlurmCluster

CACHE = Path(os.environ.get("DASK_HPC_TEST_CACHE", "/var/tmp/dask-hpc-tests"))
ENROOT = CACHE / "enroot-4.1.2"
PYTHON_PREFIX = Path(sys.prefix)  # a venv's, its python a link into /usr
REPO = Path(__file__).resolve().parents[2]


def need_enroot() -> None:
    """Fail (never skip) where tests/setup/enroot.sh has not run."""
    for path in (ENROOT / "bin" / "enroot", ENROOT / "pyxis" / "spank_pyxis.so"):
        if not path.exists():
            pytest.fail(f"{path} missing: run tests/setup/enroot.sh (tests/setup/install.sh)")
    if shutil.which("apptainer") is None:
        pytest.fail("apptainer missing: run tests/setup/install.sh")


def user_home(shared: Path, user: pwd.struct_passwd) -> Path:
    """The second user's directory in ``shared`` (0700, theirs), with ``sched`` in it."""
    home = shared / "user"
    for path in (home, home / "sched"):
        path.mkdir(mode=0o700)
        os.chown(path, user.pw_uid, user.pw_gid)
    return home


def submit_as(cluster: SlurmCluster, user: pwd.struct_passwd, text: str, env: dict) -> str:
    """The job script ``text`` submitted as ``user`` from the user's directory (``HOME`` in
    ``env``), its output to ``job.out`` there: the job's id."""
    home = Path(env["HOME"])
    (home / "job.sh").write_text(text)
    argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    argv += ["sbatch", "--parsable", f"--output={home / 'job.out'}", str(home / "job.sh")]
    cluster.root.chmod(0o755)  # the user's sbatch reads slurm.conf
    ran = cluster.run(argv, env=env, cwd=home, timeout=30)
    assert ran.returncode == 0, ran
    return ran.stdout.strip().split(";")[0]


def user_job(cluster: SlurmCluster, user: pwd.struct_passwd, text: str, env: dict) -> str:
    """:func:`submit_as`, run to its end: its output, once it completed, as that user."""
    state = cluster.wait_job(submit_as(cluster, user, text, env), timeout=180)
    out = Path(env["HOME"]) / "job.out"
    output = out.read_text(errors="replace") if out.exists() else "(no output)"
    assert state == ("COMPLETED", 0), output + cluster.log("node1")[-3000:]
    assert os.stat(out).st_uid == user.pw_uid  # the job ran as the user
    return output


def tiny_sif(where: Path, python: Path = PYTHON_PREFIX, pythonpath: str = "") -> Path:
    """A SIF of a merged-/usr skeleton whose %environment puts ``python`` (this one) first on
    PATH and ``pythonpath``, if any, on PYTHONPATH."""
    rootfs = where / "rootfs"
    for sub in ("etc", "usr", "proc", "sys", "dev", "tmp", "run", "root", "var"):
        (rootfs / sub).mkdir(parents=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        (rootfs / link).symlink_to(f"usr/{link}")
    env = rootfs / ".singularity.d" / "env"
    env.mkdir(parents=True)
    exports = f"export PATH={python}/bin:$PATH\n"
    (env / "90-environment.sh").write_text(
        exports + (f"export PYTHONPATH={pythonpath}\n" if pythonpath else "")
    )
    sif = where / "dask-hpc-deepops.sif"
    subprocess.run(
        ["apptainer", "build", "-F", str(sif), str(rootfs)], check=True, capture_output=True
    )
    return sif


def short_root() -> Path:
    """A private Slurm's directory with a short path: slurmstepd's Unix sockets in its spool
    must fit 108 bytes, which a pytest-xdist worker's tmp_path and a test's name overrun
    ("Unix socket path ... is too long. (110 > 108)": the batch job never starts)."""
    return Path(tempfile.mkdtemp(prefix="dhp-slurm-"))


def two_cpu_ranks(
    site: str, image: str, scheduler: Path, code: str, python: Path = PYTHON_PREFIX
) -> str:
    """The site's job script: one node, two CPU ranks in the site's runtime, COMMAND ``python
    -c code``; the host's ``/usr``, ``python`` (this one) and the checkout mounted where a site
    image has them in itself."""
    from dask_hpc.batch import script

    return script.render(
        script.JobRequest(
            site=site,
            nodes=1,
            workers_per_node=2,
            worker_type="cpu",
            cpus_per_worker=1,
            walltime="5",
            image=image,
            binds=["/usr", str(python), str(REPO)],
            env={"DASK_HPC__SCHEDULER_DIRECTORY": str(scheduler)},
            command=["python", "-c", code],
        )
    )
