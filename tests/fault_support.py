"""What the fault tests share (tests/test_faults.py, test_node_loss.py, test_hung.py): the
faulty COMMAND, the launchers with the options that keep the other ranks when one is lost,
killing a rank as its node's death would, and the measurements benchmarks/faults.py prints."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from harness import mpi
from harness.emulate import emulated_pals
from harness.procs import kill_tree, tagged_pids
from harness.waiting import wait_for
from jobs.background import Background, rank_pids
from support import start_cluster

FAULTY = Path(__file__).resolve().parent / "jobs" / "faulty.py"
DEATH_TIMEOUT = 5
OPTS = ["--interface", "lo", "--dashboard-address", "127.0.0.1:0"]


def faulty(*args: str) -> list[str]:
    return [sys.executable, str(FAULTY), *args]


def all_gone(timeout: float = 20) -> float:
    """Wait until no process of this test is left; return the monotonic time it was seen."""
    tag = os.environ["DASK_HPC_TEST_TAG"]
    wait_for(lambda: not tagged_pids(tag), timeout, what="every process of the test to exit")
    return time.monotonic()


def held_semaphores() -> dict[str, bool]:
    """The multiprocessing semaphores (``/dev/shm/sem.mp-*``) the test's processes have mapped:
    each name, and whether it is still in /dev/shm (not mapped as "(deleted)")."""
    held: dict[str, bool] = {}
    for pid in tagged_pids(os.environ["DASK_HPC_TEST_TAG"]):
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # it ended meanwhile
            continue
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/sem.mp-"):
                name = fields[5].split()[0]
                held[name] = held.get(name, False) or not fields[5].endswith("(deleted)")
    return held


def record(fault: str, launcher: str, seconds: float, measured: str, outcome: str) -> None:
    """Append a measurement for benchmarks/faults.py (only when DASK_HPC_FAULT_LOG is set)."""
    log = os.environ.get("DASK_HPC_FAULT_LOG")
    if log:
        with open(log, "a") as f:
            entry = dict(fault=fault, launcher=launcher, seconds=round(seconds, 2))
            entry.update(measured=measured, outcome=outcome)
            f.write(json.dumps(entry) + "\n")


# A rank lost while the cluster runs (its node died): the launcher's option that keeps the other
# ranks running, WORKERS_PER_NODE, and what the launcher itself then reports.
KEEP_RANKS = {
    "openmpi": (lambda tmp: mpi.openmpi(3, hosts=mpi.node_names(3), ppn=1,
                                        extra=["--enable-recovery"]), 1, 0),
    "mpich": (lambda tmp: mpi.mpich(3, hosts=mpi.node_names(3), ppn=1,
                                    extra=["-disable-auto-cleanup"]), 1, 9),
    "emulated-pals": (lambda tmp: emulated_pals(tmp, nodes=3, ppn=1,
                                                hydra_args=["-disable-auto-cleanup"]), 1, 9),
    "srun": (lambda tmp: ["srun", "-N", "2", "--ntasks-per-node", "2", "--no-kill",
                          "--kill-on-bad-exit=0"], 2, 137),
    # exit-timeout=none: Flux ends a job 30 s after its first task exits, unless told not to.
    "flux": (lambda tmp: ["flux", "run", "-N", "3", "--tasks-per-node", "1",
                          "-o", "exit-timeout=none"], 1, 137),
}


def kill_rank(rank: int) -> list[int]:
    """SIGKILL a rank and everything it started (its scheduler or nanny host, workers, ...),
    as a node's death ends them; return their pids."""
    return kill_tree(rank_pids()[rank])


def node_loss_result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("NODELOSS "):
            return json.loads(line[len("NODELOSS ") :])
    raise AssertionError(f"no NODELOSS line in output:\n{stdout}")


def start_keeping_ranks(
    name: str, request: pytest.FixtureRequest, env: dict[str, str], tmp_path: Path,
    command: list[str],
) -> Background:
    """3 ranks (srun: 4) under launcher ``name`` with its option that keeps the other ranks
    when one is lost, running ``command``."""
    build, wpn, _ = KEEP_RANKS[name]
    env = dict(env)
    if name in ("srun", "flux"):
        fixture = {"srun": "slurm_cluster", "flux": "flux_instance"}[name]
        env.update(request.getfixturevalue(fixture).env)
    argv = [*build(tmp_path), *start_cluster(), "cpu", str(wpn), *OPTS, "--timeout", "60"]
    argv += ["--death-timeout", str(DEATH_TIMEOUT), "--", *command]
    return Background(argv, env, tmp_path)
