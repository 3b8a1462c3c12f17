"""Bad input: one line on stderr naming the problem and the fix, non-zero exit, no traceback,
nothing started (the harness's leak check runs after every test)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from harness.mpi import mpich
from support import start_cluster


def assert_one_line_error(result, *fragments: str, code: int = 2) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("start-cluster: error: "), lines
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.stdout == ""


BAD_INPUT = [
    (["tpu", "2"], ["argument {cpu,gpu}: invalid choice: 'tpu'", "see start-cluster --help"]),
    (["cpu", "0"], ["'0' is not a positive integer"]),
    (["cpu", "two"], ["'two' is not a positive integer"]),
    (["cpu", "2.5"], ["'2.5' is not a positive integer"]),
    (["cpu"], ["the following arguments are required: WORKERS_PER_NODE"]),
    (
        ["cpu", "2", "--site", "hopper"],
        ["unknown site 'hopper'", "use one of: aurora, deepops"],
    ),
    (["cpu", "2", "--launcher", "aprun"], ["unknown launcher 'aprun'", "use one of: jsrun"]),
    (["cpu", "2", "--launcher", "pals"], ["PALS_RANKID is missing", "--launcher"]),
    (
        ["cpu", "2", "--memory-limit", "lots"],
        ["--memory-limit 'lots' is not a memory size", "16GB"],
    ),
    (["cpu", "2", "--timeout", "-1"], ["'-1' is not a positive number of seconds"]),
    (["cpu", "2", "--resources", "GPU"], ["'GPU' is not NAME=AMOUNT[,NAME=AMOUNT...]"]),
    (["cpu", "2", "--resources", "GPU=two"], ["'GPU=two' is not NAME=AMOUNT"]),
    (["cpu", "2", "--interface", "ib7"], ["network interface 'ib7'", "use one of:", "lo"]),
    (
        ["cpu", "2", "--local-directory", "/proc/forbidden"],
        ["local directory /proc/forbidden is not usable", "--local-directory"],
    ),
    (["cpu", "2", "--dashboard-address", "localhost"], ["has no port", "HOST:PORT"]),
    (["cpu", "2", "--dashboard-address", "localhost:8787"], ["names a host", "127.0.0.1:8787"]),
    (["cpu", "2", "--scheduler-port", "70000"], ["70000 is not a port number"]),
    (["gpu", "1"], ["no GPU was found on this node", "cpu workers"]),
    (
        ["gpu", "5", "--site", "polaris"],
        ["5 gpu workers per node need 5 nvidia devices", "4 GPUs (site profile)", "at most 4"],
    ),
    (
        ["gpu", "13", "--site", "aurora"],
        ["13 gpu workers per node", "exactly 12 (one per tile)"],
    ),
    (["cpu", "2", "--", "no-such-program-xyz"], ["command 'no-such-program-xyz' not found"]),
    (["cpu", "2", "--"], ["'--' is not followed by a command"]),
    (["cpu", "2", "--join", "/nonexistent/scheduler.json"], ["no such scheduler file"]),
    (["cpu", "2", "--no-tls", "--protocol", "tls"], ["--protocol tls needs TLS"]),
    (["cpu", "2", "--protocol", "tcp"], ["unencrypted while TLS is on", "--no-tls"]),
    (["cpu", "2", "--protocol", "ucx"], ["--protocol ucx sends everything unencrypted"]),
    # issue 35: a COMMAND without --, a limit of 16 bytes, a variable the rank does not have
    (
        ["cpu", "2", "python", "job.py"],
        [
            "unrecognized arguments: python job.py",
            "a COMMAND goes after --: start-cluster cpu 2 -- python job.py",
        ],
    ),
    (
        ["cpu", "2", "--nthreads", "1", "python", "job.py", "--size", "3"],
        ["a COMMAND goes after --: start-cluster cpu 2 --nthreads 1 -- python job.py --size 3"],
    ),
    (
        ["cpu", "2", "--lifetime", "55m"],
        ["unrecognized arguments: --lifetime 55m", "see start-cluster --help"],
    ),
    (
        ["cpu", "2", "--memory-limit", "16"],
        [
            "--memory-limit '16' is 16 B, too little for a Dask worker (at least 256.00 MiB)",
            "give a unit, e.g. 16GB (a bare number is bytes)",
        ],
    ),
    # issue 44: "is 1 B" for what the help allows as a fraction of the node's memory
    (
        ["cpu", "2", "--memory-limit", "1.5"],
        [
            "--memory-limit '1.5' is no share of the node's memory (a fraction is at most 1) and, "
            "as bytes, 1 B; give a unit, e.g. 1.5GB"
        ],
    ),
    (
        ["cpu", "2", "--local-directory", "$DASK_HPC_NO_SUCH_VARIABLE/w"],
        [
            "--local-directory $DASK_HPC_NO_SUCH_VARIABLE/w: $DASK_HPC_NO_SUCH_VARIABLE is not set",
            "set DASK_HPC_NO_SUCH_VARIABLE in the job",
        ],
    ),
]


@pytest.mark.parametrize(
    ("args", "fragments"), BAD_INPUT, ids=[" ".join(args) or "none" for args, _ in BAD_INPUT]
)
def test_bad_input(run_cmd, cluster_env, args: list[str], fragments: list[str]) -> None:
    result = run_cmd([*start_cluster(), *args], env=cluster_env, timeout=30)
    assert_one_line_error(result, *fragments)


def test_port_taken(run_cmd, cluster_env) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cmd(
            [*start_cluster(), "cpu", "1", "--scheduler-port", str(port)],
            env=cluster_env,
            timeout=30,
        )
        assert_one_line_error(
            result, f"port {port} on 127.0.0.1 is already in use", "--scheduler-port"
        )
        result = run_cmd(
            [*start_cluster(), "cpu", "1", "--dashboard-address", f"127.0.0.1:{port}"],
            env=cluster_env,
            timeout=30,
        )
        assert_one_line_error(result, f"port {port}", "--dashboard-address")


def test_unusable_scheduler_directory(run_cmd, cluster_env, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_cmd(
        [*start_cluster(), "cpu", "1", "--scheduler-file", str(blocker / "sub" / "s.json")],
        env=cluster_env,
        timeout=30,
    )
    assert_one_line_error(result, "scheduler directory", "is not usable", "--scheduler-file")


def test_join_of_a_file_that_is_no_scheduler_file(run_cmd, cluster_env, tmp_path: Path) -> None:
    not_one = tmp_path / "notes.json"
    not_one.write_text("{}")
    result = run_cmd([*start_cluster(), "cpu", "1", "--join", str(not_one)], env=cluster_env)
    assert_one_line_error(result, str(not_one), "not a usable scheduler file", "running cluster")


def test_cluster_directory_that_cannot_be_made_after_the_scheduler_forked(
    run_cmd, cluster_env, tmp_path: Path
) -> None:
    """A file where this job's cluster directory goes: found by rank 0 only after it forked
    the scheduler and the nanny host; both end, one line, exit 2 (the leak check runs after)."""
    env = {
        **cluster_env,
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        "OMPI_MCA_ess_base_jobid": "4242",  # Open MPI's job id: the cluster directory's name
    }
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "dask-hpc-4242").write_text("")
    result = run_cmd([*start_cluster(), "cpu", "1", "--", "true"], env=env, timeout=60)
    assert_one_line_error(
        result, "cluster directory", "dask-hpc-4242", "is not a directory", "--scheduler-file"
    )


def test_layout_mismatch_under_real_mpich(run_cmd, cluster_env) -> None:
    # -disable-auto-cleanup: hydra would kill the other ranks as soon as the first one exits
    # with an error, before a rank slower to start (on a loaded machine) printed its line.
    launch = mpich(3, extra=["-disable-auto-cleanup"])
    result = run_cmd([*launch, *start_cluster(), "cpu", "2"], env=cluster_env, timeout=60)
    assert result.returncode != 0
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("start-cluster: error:")]
    assert len(errors) == 3  # one line per rank, each naming both numbers
    assert all("this node runs 3 ranks but WORKERS_PER_NODE is 2" in ln for ln in errors)
    assert all("give WORKERS_PER_NODE 3 (one worker per rank)" in ln for ln in errors)
    assert "Traceback" not in result.stderr


def test_two_ranks_a_node_with_one_worker_names_the_fix_emulated(run_cmd, cluster_env) -> None:
    """``flux run -N3 -n6 start-cluster cpu 1``: two ranks on this node, one worker asked
    for; the fix is ``cpu 2`` (or one rank a node), not the same suggestion twice. Open MPI's
    variables for one rank of such a launch (emulated: the message needs no other rank)."""
    env = {**cluster_env, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "OMPI_MCA_ess_base_jobid": "4243"}
    result = run_cmd([*start_cluster(), "cpu", "1", "--dry-run"], env=env, timeout=60)
    assert_one_line_error(
        result, "this node runs 2 ranks but WORKERS_PER_NODE is 1",
        "give WORKERS_PER_NODE 2 (one worker per rank), or launch 1 rank per node",
    )


def test_scheduler_that_never_appears(run_cmd, cluster_env, tmp_path: Path) -> None:
    """A worker rank whose rank 0 never starts stops after --timeout, naming the file."""
    env = {
        **cluster_env,
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        "OMPI_MCA_ess_base_jobid": "4711",
    }
    result = run_cmd([*start_cluster(), "cpu", "1", "--timeout", "1.5"], env=env, timeout=30)
    assert_one_line_error(
        result,
        "no scheduler file from this launch at",
        "dask-hpc-4711/scheduler.json",
        "after 1.5 s",
        "--timeout",
        code=3,
    )


def test_python_dash_m_is_the_same_command(run_cmd, cluster_env) -> None:
    result = run_cmd([sys.executable, "-m", "dask_hpc", "cpu", "0"], env=cluster_env)
    assert_one_line_error(result, "'0' is not a positive integer")


def test_a_message_line_is_one_write(monkeypatch) -> None:
    """Ranks share stderr: with PYTHONUNBUFFERED, print() writes the text and the newline
    apart and two ranks' lines ran together (three MPICH ranks' errors came out as two)."""
    from dask_hpc.errors import say

    class Recorder:
        def __init__(self) -> None:
            self.writes: list[str] = []

        def write(self, text: str) -> int:
            self.writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    recorder = Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    say("error: this node runs 3 ranks")
    assert recorder.writes == ["start-cluster: error: this node runs 3 ranks\n"]


def test_a_dry_run_into_a_closed_pipe_ends_quietly(cluster_env) -> None:
    """`start-cluster ... --dry-run | head`: the reader gone before the plan is written; no
    BrokenPipe traceback, the status of a process SIGPIPE ends (issue 35)."""
    import subprocess

    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails with EPIPE
    try:
        done = subprocess.run(
            [*start_cluster(), "cpu", "2", "--dry-run"],
            stdout=write,
            stderr=subprocess.PIPE,
            env=cluster_env,
            timeout=60,
            text=True,
        )
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", done.stderr


def test_a_command_that_is_not_executable_says_so(run_cmd, cluster_env, tmp_path: Path) -> None:
    """``-- ./job.py`` without its x bit: not "not found", but how to run it."""
    job = tmp_path / "job.py"
    job.write_text("print('hi')\n")
    result = run_cmd([*start_cluster(), "cpu", "1", "--", "./job.py"], env=cluster_env,
                     cwd=tmp_path, timeout=60)
    assert_one_line_error(
        result, "command './job.py' is not executable", "chmod +x ./job.py", "-- python ./job.py"
    )
