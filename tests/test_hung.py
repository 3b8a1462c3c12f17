"""A hung rank (every process of it stopped) is found and given up; a busy or loaded one never.

Real launchers (Open MPI, MPICH hydra, Slurm srun; PALS emulated over hydra) with the options
that keep the other ranks (tests/test_faults.py's ``KEEP_RANKS``), 3 ranks (srun: 4), a real
computation as COMMAND (tests/jobs/hung_job.py). A hang is SIGSTOP of the rank's process and
everything it started, as a node that hangs stops them all with their connections open.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fault_support import DEATH_TIMEOUT, KEEP_RANKS, OPTS, all_gone, record, start_keeping_ranks
from harness import mpi
from harness.emulate import emulated_jsrun
from harness.procs import run_cmd, tagged_pids
from harness.waiting import wait_for
from jobs.background import Background, rank_pids
from support import start_cluster

JOB = Path(__file__).resolve().parent / "jobs" / "hung_job.py"
DEFAULT_HUNG_TIMEOUT = 30.0  # hpc.hung-timeout's default: what the launcher tests run with
HUNG = re.compile(r"warning: rank 2 on \S+ hung \(no sign of life for \d+ s\)")
# The lost-rank tests' launchers with the options that keep the other ranks, and two without:
# a given-up rank that runs again exits 0, so even a launcher that ends the job when a rank
# fails lets it go on. (name: argv prefix for 3 ranks of one worker each)
LAUNCHERS = {
    **{name: lambda tmp, name=name: KEEP_RANKS[name][0](tmp) for name in KEEP_RANKS},
    "openmpi-plain": lambda tmp: mpi.openmpi(3, hosts=mpi.node_names(3), ppn=1),
    "emulated-jsrun": lambda tmp: emulated_jsrun(tmp, nodes=3, ppn=1),
}


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def job_lines(stdout: str) -> list[dict]:
    prefix = "HUNGJOB "
    return [json.loads(line[len(prefix) :]) for line in stdout.splitlines()
            if line.startswith(prefix)]  # fmt: skip


def rank_processes(rank: int) -> list[psutil.Process]:
    """The rank's process and everything it started (scheduler or nanny host, workers, ...)."""
    victim = psutil.Process(rank_pids()[rank])
    return [victim, *victim.children(recursive=True)]


def send(procs: list[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes of ``procs`` still running (not exited, not a zombie)."""
    return [p for p in procs if _running(p)]


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # exited (and reaped) between the two questions
        return False


def start(
    name: str, request: pytest.FixtureRequest, env: dict[str, str], tmp_path: Path,
    command: list[str],
) -> Background:
    """3 ranks (srun: 4, 2 per node) under launcher ``name``, running ``command``."""
    if name in KEEP_RANKS:
        return start_keeping_ranks(name, request, env, tmp_path, command)
    argv = [*LAUNCHERS[name](tmp_path), *start_cluster(), "cpu", "1", *OPTS, "--timeout", "60"]
    argv += ["--death-timeout", str(DEATH_TIMEOUT), "--", *command]
    return Background(argv, env, tmp_path)


@pytest.mark.parametrize("name", list(LAUNCHERS))
def test_a_hung_rank_is_given_up_and_the_job_goes_on(
    name: str, request: pytest.FixtureRequest, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """Every process of rank 2 stopped mid-computation, under each launcher (with its option
    that keeps the other ranks, and Open MPI and emulated jsrun without), and the default
    hpc.hung-timeout: rank 0 names it in one line within
    the timeout, Dask recomputes its tasks elsewhere, the result is right and its worker is
    gone from the scheduler. Woken (SIGCONT) while the cluster still runs, the rank stops what
    it started and exits by itself, and its worker does not come back; the job then ends with
    COMMAND's status (0), nothing left."""
    hold, release = tmp_path / "hold.json", tmp_path / "release"
    job = [sys.executable, str(JOB), "compute", str(hold), str(release)]
    run = start(name, request, cluster_env, tmp_path, job)
    wait_for(hold.exists, 60, what="the computation under way")
    stopped = rank_processes(2)
    hung_at = time.monotonic()
    send(stopped, signal.SIGSTOP)
    run.wait_text("hung (no sign of life", DEFAULT_HUNG_TIMEOUT + 30)
    found = time.monotonic() - hung_at
    wait_for(lambda: job_lines(run.stdout), 60, what="the computation's result")
    result = job_lines(run.stdout)[0]
    assert result["result"] == result["expected"], run.output()
    assert "2" in result["workers_before"] and "2" not in result["workers_after"], result
    assert len(HUNG.findall(run.stderr)) == 1, run.output()
    woken = time.monotonic()
    send(stopped, signal.SIGCONT)
    wait_for(lambda: not alive(stopped), 30, what="the woken rank's processes to exit")
    exited = time.monotonic() - woken
    assert run.proc.poll() is None, run.output()  # rank 0 and the others go on
    # the launcher forwards what the woken rank wrote (flux run: through its brokers, after)
    run.wait_text("rank 0 gave this rank up", 30)
    release.touch()
    code = run.wait(60)
    end = job_lines(run.stdout)[1]
    assert end["released"] and "2" not in end["workers_at_end"], run.output()
    assert "command exited with status 0: shutting down" in run.stderr, run.output()
    assert "Traceback" not in run.stderr, run.output()
    assert "rank 0 is gone" not in run.stderr, run.output()
    assert code == 0 or name == "srun" and code in (0, 137), run.output()
    assert found <= DEFAULT_HUNG_TIMEOUT + 10, (found, run.output())
    all_gone()
    record(
        "a non-zero rank hung (SIGSTOP of it and all it started)",
        name,
        found,
        "stop -> rank named and its workers removed",
        f"result right; woken, the rank exited {exited:.1f} s after SIGCONT; launcher exits "
        f"{code}",
    )


def test_a_rank_woken_after_the_job_ended_exits_at_once(
    request: pytest.FixtureRequest, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """A hung rank given up and still stopped when COMMAND ends does not hold up rank 0's end
    (no wait for it at shutdown); woken after rank 0 exited, it exits at once, nothing left."""
    hold, release = tmp_path / "hold.json", tmp_path / "release"
    release.touch()  # COMMAND ends right after its result
    job = [sys.executable, str(JOB), "compute", str(hold), str(release)]
    env = {**cluster_env, "DASK_HPC__HUNG_TIMEOUT": "10"}
    run = start_keeping_ranks("mpich", request, env, tmp_path, job)
    wait_for(hold.exists, 60, what="the computation under way")
    stopped = rank_processes(2)
    rank0 = psutil.Process(rank_pids()[0])
    send(stopped, signal.SIGSTOP)
    run.wait_text("hung (no sign of life", 40)
    ended = time.monotonic()
    wait_for(lambda: not _running(rank0), 60,
             what="rank 0 to exit while rank 2 is stopped")  # fmt: skip
    rank0_after = time.monotonic() - ended
    assert run.proc.poll() is None  # hydra waits for its stopped rank
    send(stopped, signal.SIGCONT)
    code = run.wait(30)
    assert job_lines(run.stdout)[0]["result"] == job_lines(run.stdout)[0]["expected"]
    assert "rank 0 gave this rank up" in run.stderr, run.output()
    assert "Traceback" not in run.stderr, run.output()
    assert code == 0, run.output()
    assert rank0_after < 30, run.output()
    all_gone()


def test_a_worker_holding_the_gil_for_minutes_is_never_given_up(
    request: pytest.FixtureRequest, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """A task that holds its worker's GIL (a C call that keeps it) for 8 times hpc.hung-timeout:
    the worker's event loop and its heartbeats stop (the scheduler's view of it grows stale by
    more than the timeout), but its rank's own process is not the worker and answers the roll
    call: the rank is never given up, the task's result comes back, every worker stays."""
    hold = tmp_path / "hold.json"
    timeout, seconds = 5, 40
    env = {**cluster_env, "DASK_HPC__HUNG_TIMEOUT": str(timeout)}
    job = [sys.executable, str(JOB), "gil", str(hold), "2", str(seconds)]
    run = start_keeping_ranks("mpich", request, env, tmp_path, job)
    code = run.wait(seconds + 90)
    result = job_lines(run.stdout)[0]
    assert code == 0, run.output()
    assert result["busy"] == "2" and result["busy_seconds"] >= seconds - 2, result
    assert result["stalest"] > 3 * timeout, result  # the worker's own heartbeats stopped
    assert result["result"] == result["expected"], result
    assert result["workers_after"] == result["workers_before"] == ["0", "1", "2"], result
    assert "hung" not in run.stderr and "gave this rank up" not in run.stderr, run.output()
    all_gone()


def _hogs(count: int, env: dict[str, str], workdir: Path) -> list[Background]:
    """``count`` processes that spin on a CPU until killed (a loaded node)."""
    spin = [sys.executable, "-c", "while True: pass"]
    return [Background(spin, env, workdir, f"hog{i}") for i in range(count)]


def hold_for(seconds: float) -> None:
    """Let ``seconds`` pass: the length of a fault (a rank stopped, then running), which is
    what the test sets, not a wait for something to happen."""
    threading.Event().wait(seconds)


def test_a_rank_on_a_loaded_node_is_never_given_up(
    request: pytest.FixtureRequest, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """hpc.hung-timeout 5 s, and for 4 times that the machine is loaded two ways while
    COMMAND computes: a CPU-bound process per core beside the ranks, and rank 2 itself
    (every process of it) stopped 3 s of every 4 (a node so busy its processes run a quarter
    of the time): its rank answers whenever it runs, so it is never given up; the result is
    right and every worker stays."""
    hold, release = tmp_path / "hold.json", tmp_path / "release"
    release.touch()
    env = {**cluster_env, "DASK_HPC__HUNG_TIMEOUT": "5"}
    job = [sys.executable, str(JOB), "compute", str(hold), str(release)]
    run = start_keeping_ranks("mpich", request, env, tmp_path, job)
    wait_for(hold.exists, 60, what="the computation under way")
    hogs = _hogs(psutil.cpu_count(), cluster_env, tmp_path)
    rank2 = rank_processes(2)
    try:
        until = time.monotonic() + 20  # 5 stops of 3 s
        while time.monotonic() < until and run.proc.poll() is None:
            send(rank2, signal.SIGSTOP)
            hold_for(3)
            send(rank2, signal.SIGCONT)
            hold_for(1)
    finally:
        send(rank2, signal.SIGCONT)
        for hog in hogs:
            hog.kill()
    code = run.wait(120)
    result = job_lines(run.stdout)[0]
    assert result["result"] == result["expected"], run.output()
    assert result["workers_after"] == result["workers_before"], run.output()
    assert "hung" not in run.stderr and "gave this rank up" not in run.stderr, run.output()
    assert code == 0, run.output()
    all_gone()


@pytest.mark.parametrize(
    ("value", "problem"),
    [("soon", "is not a number"), ("2", "below 5 s"), ("-1", "below 5 s")],
)
def test_a_bad_hung_timeout_is_one_line_and_starts_nothing(
    value: str, problem: str, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**cluster_env, "DASK_HPC__HUNG_TIMEOUT": value}
    res = run_cmd([*start_cluster(), "cpu", "1", *OPTS, "--", "true"], env=env, timeout=60)
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"start-cluster: error: hpc.hung-timeout {value!r} ")
    assert problem in lines[0] and "DASK_HPC__HUNG_TIMEOUT" in lines[0], lines
    assert "Traceback" not in res.stderr
    assert not tagged_pids(env["DASK_HPC_TEST_TAG"])


def test_a_hung_timeout_of_0_turns_the_check_off(cluster_env: dict[str, str]) -> None:
    env = {**cluster_env, "DASK_HPC__HUNG_TIMEOUT": "0"}
    res = run_cmd([*start_cluster(), "cpu", "1", *OPTS, "--dry-run"], env=env, timeout=60)
    assert res.returncode == 0, res
    assert json.loads(res.stdout)["hung_timeout"] is None
