"""The forkserver and resource tracker of a rank are forks of its nanny host (issue 23).

A rank runs one Python: its nanny host, forkserver, resource tracker and workers are all
forks of it (``forked_mp``), so none of them starts an interpreter or imports Dask again; and
nothing is left in the temporary directory (multiprocessing's ``pymp-*``) once it ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness.mpi import openmpi
from support import TESTS, start_cluster

TREE = TESTS / "jobs" / "process_tree.py"
OPTS = ["--interface", "lo", "--dashboard-address", "127.0.0.1:0"]

# (launcher prefix, WORKERS_PER_NODE, workers per rank)
LAUNCHES = {"local": ([], 2, 2), "openmpi": (openmpi(2), 2, 1)}


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
def test_a_ranks_processes_are_all_forks_of_it_and_leave_no_temp_dir(
    launcher: str, run_cmd, cluster_env, tmp_path: Path
) -> None:
    prefix, per_node, per_rank = LAUNCHES[launcher]
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**cluster_env, "TMPDIR": str(tmpdir)}
    cmd = [*prefix, *start_cluster(), "cpu", str(per_node), *OPTS, "--", sys.executable, str(TREE)]
    result = run_cmd(cmd, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("TREE "))
    chains = json.loads(line.removeprefix("TREE ")).values()
    assert len(chains) == 2
    for worker, server, host, rank in chains:
        # One interpreter per rank: every process below the rank is a fork of it.
        assert "start-cluster" in rank["cmdline"]
        assert worker["cmdline"] == server["cmdline"] == host["cmdline"] == rank["cmdline"]
        # The nanny host's children: the forkserver and the resource tracker, both forks.
        assert host["children"] == [rank["cmdline"]] * 2
        # The forkserver's: this rank's workers.
        assert server["children"] == [rank["cmdline"]] * per_rank
    leftovers = [p.name for p in tmpdir.iterdir() if p.name.startswith(("pymp-", "dask-hpc-mp-"))]
    assert leftovers == []


FORKED = """
import multiprocessing, os, sys
from pathlib import Path
from multiprocessing import forkserver, resource_tracker
from dask_hpc.running import forked_mp

def square(x, queue):
    import os
    queue.put((x * x, os.environ.get("PYTHONSAFEPATH"), sys.flags.safe_path))

if __name__ == "__main__":
    directory = Path(sys.argv[1])
    assert forked_mp.start(directory)
    server = forkserver._forkserver._forkserver_pid
    tracker = resource_tracker._resource_tracker._pid
    own = Path("/proc/self/cmdline").read_bytes()
    assert Path(f"/proc/{server}/cmdline").read_bytes() == own  # forks, not new Pythons
    assert Path(f"/proc/{tracker}/cmdline").read_bytes() == own
    assert (directory / "forkserver").stat().st_mode & 0o777 == 0o600
    ctx = multiprocessing.get_context("forkserver")
    queue = ctx.Queue()  # a semaphore, registered with the forked resource tracker
    process = ctx.Process(target=square, args=(7, queue))
    process.start()
    print("RESULT", queue.get(timeout=30), flush=True)
    process.join(30)
    assert process.exitcode == 0
    assert os.waitpid(server, os.WNOHANG) == (0, 0)  # the same forkserver, still running
"""


def run_script(script: Path, text: str, directory: Path, env: dict[str, str]):
    """Run ``text`` as a Python script given ``directory``; it must exit 0."""
    script.write_text(text)
    result = subprocess.run(
        [sys.executable, str(script), str(directory)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_forked_forkserver_runs_multiprocessing_processes(tmp_path: Path, tagged_env) -> None:
    directory = tmp_path / "mp"
    directory.mkdir(mode=0o700)
    result = run_script(tmp_path / "forked.py", FORKED, directory, tagged_env)
    assert "RESULT (49, None, False)" in result.stdout  # forks: nothing of PYTHONSAFEPATH
    assert "resource_tracker" not in result.stderr  # no "died unexpectedly, relaunching"


FALLBACK = """
import multiprocessing, sys, time
from pathlib import Path
from multiprocessing import forkserver
from dask_hpc.running import forked_mp, nanny_host

def square(x, queue):
    import os
    queue.put((x * x, os.environ.get("PYTHONSAFEPATH"), sys.flags.safe_path))

if __name__ == "__main__":
    forked_mp.supported = lambda: False  # as on a Python whose internals differ
    nanny_host.start_forkserver(1, Path(sys.argv[1]))
    server = forkserver._forkserver._forkserver_pid
    own = Path("/proc/self/cmdline").read_bytes()
    # A new Python: fork, then exec (until the exec is done, the cmdline is ours, or empty).
    deadline = time.monotonic() + 30
    while b"forkserver" not in (seen := Path(f"/proc/{server}/cmdline").read_bytes()):
        assert time.monotonic() < deadline, f"the forkserver never exec'd: {seen!r}"
        time.sleep(0.01)
    assert seen != own
    # a new Python without the working directory on sys.path, which its workers do not pass on
    assert b"PYTHONSAFEPATH=1" in Path(f"/proc/{server}/environ").read_bytes().split(b"\\0")
    assert "PYTHONSAFEPATH" not in __import__("os").environ
    ctx = multiprocessing.get_context("forkserver")
    queue = ctx.Queue()
    process = ctx.Process(target=square, args=(6, queue))
    process.start()
    print("RESULT", queue.get(timeout=60), flush=True)
    process.join(30)
    assert process.exitcode == 0
"""


def test_where_the_internals_differ_multiprocessing_starts_its_own(
    tmp_path: Path, tagged_env
) -> None:
    result = run_script(tmp_path / "fallback.py", FALLBACK, tmp_path, tagged_env)
    assert "RESULT (36, None, True)" in result.stdout
