"""The user's own binds (issue 44, item 5): ``hpc-job --bind``, ``hpc-cluster --bind`` and
``HPCCluster(binds=)`` give the ranks' containers a directory they would not see (a project's
data on /lus/flare, /eagle, /lustre/orion), checked like the profile's directories: a bad one is
one line and exit 2 when the script is written, a SRC missing on the node one line and exit 2 in
the job before any rank starts.

What runs for real: the local image under the real Apptainer, a real Slurm job whose two workers
read the bound directory (and cannot write it: ``:ro``), and the job script under bash."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from build_support import require_apptainer

from dask_hpc.batch.binds import Bind, parse
from dask_hpc.elastic.cluster import HPCCluster

HPC_JOB = [sys.executable, "-m", "dask_hpc.batch"]
HPC_CLUSTER = [sys.executable, "-m", "dask_hpc.elastic"]
BASE = ["--site", "generic", "--batch-system", "slurm", "--nodes", "1", "--workers-per-node",
        "2", "--cpus-per-worker", "1", "--worker-type", "cpu"]  # fmt: skip

# What each worker sees at /data: the file's text, and whether a write there is refused.
READER = """\
import json, os
from distributed import Client

def look():
    try:
        open("/data/probe-write", "w").close()
        wrote = "written"
    except OSError as error:
        wrote = os.strerror(error.errno)
    return {"text": open("/data/input.txt").read(), "write": wrote}

with Client() as client:
    print("BINDS " + json.dumps(client.run(look)), flush=True)
"""


def one_line(result, prog: str, *fragments: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr holding ``fragments``; the line."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_bind_syntax_is_apptainers() -> None:
    assert parse("/lus/flare/projects/P") == Bind("/lus/flare/projects/P", "/lus/flare/projects/P")
    assert parse("/eagle/P:/data:ro").spec() == "/eagle/P:/data:ro"
    assert parse("/eagle/P:/data").spec() == "/eagle/P:/data"
    assert parse("/eagle/P").spec() == "/eagle/P"


@pytest.mark.parametrize(
    ("bind", "fragments"),
    [
        ("data", ["SRC 'data' is not an absolute path", "--bind SRC[:DST[:ro]]"]),
        ("/eagle/P:data", ["DST 'data' is not an absolute path"]),
        ("/a,/b", ["has a comma", "give each directory its own --bind"]),
        ("/eagle/P:/data:rx", ["'rx' is not ro or rw"]),
        ("/eagle/P:/data:ro:x", ["more colons than SRC:DST:MODE"]),
        ("/eagle/P:/", ["would cover the container's /"]),
        ("/etc/hostname", ["--bind /etc/hostname is not a directory", "--bind /etc"]),
    ],
)
def test_a_bad_bind_is_one_line_and_nothing_is_written(
    run_cmd, tmp_path: Path, bind: str, fragments: list[str]
) -> None:
    image = tmp_path / "img.sif"
    image.write_text("")
    out = tmp_path / "job.sh"
    argv = [*HPC_JOB, *BASE, "--image", str(image), "--no-verify", "--output", str(out),
            "--bind", bind, "--", "python", "job.py"]  # fmt: skip
    one_line(run_cmd(argv, timeout=60), "hpc-job", *fragments)
    assert not out.exists()


def test_two_binds_onto_one_place_are_refused(run_cmd, tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    image.write_text("")
    argv = [*HPC_JOB, *BASE, "--image", str(image), "--no-verify", "--bind", "/x:/data",
            "--bind", "/y:/data/", "--", "true"]  # fmt: skip
    one_line(run_cmd(argv, timeout=60), "hpc-job", "two binds onto /data/", "its own DST")


@pytest.mark.parametrize("how", [["--site", "perlmutter", "--walltime", "10"], ["--python",
                                 sys.executable, *BASE]])  # fmt: skip
def test_a_bind_for_a_job_without_an_image_is_refused(run_cmd, how: list[str]) -> None:
    """Perlmutter's ranks and --python's run on the node, which sees every path already."""
    argv = [*HPC_JOB, "--nodes", "1", *how, "--bind", "/tmp", "--", "true"]
    one_line(
        run_cmd(argv, timeout=60),
        "hpc-job",
        "a bind is for the ranks' containers, and this job runs none",
        "leave --bind out, or give an image",
    )


def test_a_source_missing_on_the_node_stops_the_job_before_any_rank(
    run_cmd, tmp_path: Path
) -> None:
    """The job's own check: one line, exit 2, srun never called (a stand-in records it)."""
    image = tmp_path / "img.sif"
    image.write_text("")
    missing = "/nonexistent-dask-hpc-data/project"
    argv = [*HPC_JOB, *BASE, "--image", str(image), "--no-verify", "--output",
            str(tmp_path / "job.sh"), "--bind", f"{missing}:/data:ro", "--", "true"]  # fmt: skip
    written = run_cmd(argv, timeout=60)
    assert written.returncode == 0 and written.stderr == "", written.stderr
    assert f"--bind {missing}:/data:ro " in (tmp_path / "job.sh").read_text()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name in ("srun", "apptainer"):
        stand_in = bin_dir / name
        stand_in.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n')
        stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = run_cmd(["bash", str(tmp_path / "job.sh")], env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"dask-hpc: --bind {missing} is not a directory on this node; create it, or bind a "
        "directory of the site's shared file systems"
    ]
    assert not calls.exists()


def test_hpc_cluster_and_hpccluster_bind_the_same_way(run_cmd, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    image = tmp_path / "img.sif"
    image.write_text("")
    base = [*HPC_CLUSTER, "script", "cpu", "--site", "generic", "--batch-system", "slurm",
            "--workers-per-node", "1", "--cpus-per-worker", "1", "--directory",
            str(tmp_path / "c")]  # fmt: skip
    good = run_cmd([*base, "--image", str(image), "--bind", f"{data}:/data:ro"], timeout=60)
    assert good.returncode == 0, good.stderr
    # the cluster's directory, then the user's
    cluster, user = re.escape(str(tmp_path / "c")), re.escape(f"{data}:/data:ro")
    assert re.search(rf"apptainer exec --bind {cluster}/dask-hpc-\w+ --bind {user} ", good.stdout)
    assert f"for dask_hpc_dir in {data}; do" in good.stdout
    bad = run_cmd([*base, "--image", str(image), "--bind", "/a,b"], timeout=60)
    one_line(bad, "hpc-cluster", "binds= (--bind) '/a,b' has a comma")
    none = run_cmd([*base, "--bind", str(data)], timeout=60)
    one_line(none, "hpc-cluster", "a bind is for the ranks' containers")
    # HPCCluster's settings, as hpc-cluster script settles them (nothing starts): the binds
    # are kept with them, for a takeover (attach) to render the same jobs
    probe = HPCCluster.__new__(HPCCluster)
    HPCCluster._settle(
        probe, "cpu", site="generic", batch_system="slurm", workers_per_node=1,
        cpus_per_worker=1, image=str(image), binds=[f"{data}:/data:ro"],
        directory=tmp_path / "c", check_commands=False,
    )  # fmt: skip
    assert probe.settings["binds"] == [f"{data}:/data:ro"]
    assert f" --bind {data}:/data:ro " in probe.job_script()


@pytest.mark.apptainer
@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_every_worker_reads_the_bound_directory_read_only(
    local_image: Path, slurm_cluster, cluster_env, run_cmd, tmp_path: Path
) -> None:
    """A real Slurm job, the local image under the real Apptainer: --bind DATA:/data:ro; the
    control shows /data is not there without it."""
    require_apptainer()
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("bound data\n")
    reader = tmp_path / "reader.py"
    reader.write_text(READER)
    bare = run_cmd(["apptainer", "exec", str(local_image), "test", "-e", "/data/input.txt"])
    assert bare.returncode == 1, bare.stdout + bare.stderr  # the control: not there unbound
    script = tmp_path / "job.sh"
    argv = [*HPC_JOB, *BASE, "--image", str(local_image), "--no-verify", "--walltime", "10",
            "--output", str(script), "--bind", f"{data}:/data:ro", "--",
            "python3", str(reader)]  # fmt: skip
    written = run_cmd(argv, timeout=60)
    assert written.returncode == 0, written.stderr
    env = {**cluster_env, "DASK_HPC__TIMEOUT": "240"}  # containers start one by one on 2 cores
    job = slurm_cluster.sbatch(script.read_text(), env={**env, **slurm_cluster.env}, cwd=tmp_path)
    state = slurm_cluster.wait_job(job, timeout=420)
    output = slurm_cluster.job_output(job)
    assert state == ("COMPLETED", 0), output[-6000:]
    line = next(x for x in output.splitlines() if x.startswith("BINDS "))
    seen = json.loads(line[len("BINDS ") :])
    assert len(seen) == 2, seen
    for view in seen.values():
        assert view == {"text": "bound data\n", "write": "Read-only file system"}, seen
    assert list(data.iterdir()) == [data / "input.txt"]


def test_a_pyxis_job_mounts_the_users_binds_as_given(run_cmd, tmp_path: Path) -> None:
    """DeepOps' runtime, Pyxis: SRC:DST:ro goes into --container-mounts as it is (Pyxis and
    podman take Apptainer's form), after the check that SRC is a directory on the node."""
    image = tmp_path / "dask-hpc-deepops.sqsh"
    image.write_text("")
    argv = [*HPC_JOB, "--site", "deepops", "--nodes", "1", "--workers-per-node", "1",
            "--gpus-per-node", "1", "--cpus-per-worker", "1", "--image", str(image),
            "--no-verify", "--bind", f"{tmp_path}:/data:ro", "--", "true"]  # fmt: skip
    result = run_cmd(argv, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if line.startswith("for dask_hpc_dir in"))
    added = "dask_hpc_mounts=${dask_hpc_mounts:+$dask_hpc_mounts,}"
    mount = lines.index(f"{added}{tmp_path}:/data:ro")
    assert check < mount < len(lines) - 1
    assert '--container-mounts="$dask_hpc_mounts"' in lines[-1]
