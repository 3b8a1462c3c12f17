"""A rank or a whole node lost while the cluster runs, under real launchers (Open MPI, MPICH
hydra, emulated PALS, Slurm srun, Flux flux run) with the options that keep the other ranks:
the job goes on with the right result; rank 0 lost still ends everything. Nothing may be left
running (the autouse leak check). With ``DASK_HPC_FAULT_LOG`` set, each test appends what it
measured (benchmarks/faults.py)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fault_support import (
    DEATH_TIMEOUT,
    FAULTY,
    KEEP_RANKS,
    OPTS,
    all_gone,
    faulty,
    kill_rank,
    node_loss_result,
    record,
    start_keeping_ranks,
)
from harness.waiting import wait_for
from jobs.background import Background, rank_pids
from support import start_cluster

from dask_hpc.running import roster


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def test_ranks_lost_together_are_named_in_one_line() -> None:
    """At 1,000 workers, 100 ranks killed at once printed 100 warnings: ranks lost within one
    turn of rank 0's loop are named in one phrase, their numbers as ranges, a few nodes shown."""
    hosts = {rank: f"node{rank // 2}" for rank in range(200)}
    assert roster.where_lost([7], hosts) == "rank 7 on node3"
    many = [*range(2, 52), *range(60, 110), 150]
    assert roster.where_lost(many, hosts) == (
        "101 ranks (2-51, 60-109, 150) on 51 node(s) (node1, node2, node3, node4, ...)"
    )
    assert roster.where_lost([5, 4], {4: "a", 5: "a"}) == "2 ranks (4-5) on 1 node(s) (a)"


@pytest.mark.parametrize("name", list(KEEP_RANKS))
def test_a_lost_rank_does_not_end_the_job(
    name: str, request: pytest.FixtureRequest, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """SIGKILL of rank 2 and all it started, mid-computation, under each launcher's option
    that keeps the other ranks: Dask recomputes its tasks, COMMAND gets the right result,
    rank 0 names the lost rank once and exits with COMMAND's status."""
    launcher_status = KEEP_RANKS[name][2]
    hold = tmp_path / "hold.json"
    job = [sys.executable, str(FAULTY.parent / "node_loss.py"), str(hold)]
    run = start_keeping_ranks(name, request, cluster_env, tmp_path, job)
    wait_for(hold.exists, 60, what="the computation under way")
    killed = time.monotonic()
    kill_rank(2)
    code = run.wait(90)
    result = node_loss_result(run.stdout)
    assert result["result"] == result["expected"], run.output()
    lost = [w for w in result["workers_before"] if w not in result["workers_after"]]
    assert lost == ["2"], run.output()
    assert len(re.findall(r"warning: rank 2 on \S+ was lost", run.stderr)) == 1, run.output()
    assert "command exited with status 0: shutting down" in run.stderr, run.output()
    assert "Traceback" not in run.stderr, run.output()
    assert code == launcher_status, run.output()  # the launcher's own report of a killed rank
    gone = all_gone()
    record(
        "a non-zero rank lost (SIGKILL of it and all it started)",
        name,
        gone - killed,
        "kill -> result right and every process gone",
        f"rank 0 names the lost rank, Dask recomputes its tasks, COMMAND exits 0; launcher "
        f"exits {code}",
    )


@pytest.mark.parametrize("name", list(KEEP_RANKS))
def test_rank_0_lost_still_ends_everything_under_the_options_that_keep_ranks(
    name: str, request: pytest.FixtureRequest, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """The launcher no longer ends the job for a lost rank: the other ranks stop by
    themselves when rank 0 (scheduler, COMMAND) is the one lost."""
    hold = tmp_path / "hold.json"
    run = start_keeping_ranks(name, request, cluster_env, tmp_path, faulty("hold", str(hold)))
    wait_for(hold.exists, 60, what="COMMAND")
    killed = time.monotonic()
    kill_rank(0)
    code = run.wait(DEATH_TIMEOUT + 40)
    gone = all_gone()
    # Open MPI's --enable-recovery makes mpirun exit 0 whatever its ranks' statuses.
    assert code == 0 if name == "openmpi" else code != 0, run.output()
    assert re.search(r"error: (lost the scheduler|rank 0 is gone)", run.stderr), run.output()
    assert gone - killed < DEATH_TIMEOUT + 15, run.output()
    record(
        "rank 0 lost, launcher keeping ranks",
        name,
        gone - killed,
        "kill -> every process gone",
        f"the other ranks stop by themselves ('rank 0 is gone'); launcher exits {code}",
    )


def test_abort_on_node_loss_stops_the_cluster(cluster_env: dict[str, str], tmp_path: Path) -> None:
    """--abort-on-node-loss: today's behaviour, by start-cluster itself, whatever the launcher
    allows: COMMAND is stopped, every rank ends, rank 0 exits 5."""
    build, wpn, _ = KEEP_RANKS["mpich"]
    hold = tmp_path / "hold.json"
    argv = [*build(tmp_path), *start_cluster(), "cpu", str(wpn), *OPTS, "--timeout", "60"]
    argv += ["--abort-on-node-loss", "--", *faulty("hold", str(hold))]
    run = Background(argv, cluster_env, tmp_path)
    wait_for(hold.exists, 60, what="COMMAND")
    killed = time.monotonic()
    kill_rank(2)
    code = run.wait(60)
    gone = all_gone()
    assert "error: rank 2 on" in run.stderr and "stopping the cluster" in run.stderr, run.output()
    assert code != 0, run.output()
    assert gone - killed < 30, run.output()


def test_a_node_lost_under_srun_no_kill_keeps_the_job(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """A whole node dies: its rank, that rank's processes, the step's slurmstepd and the node's
    slurmd (a private 3-node Slurm, node3 never comes back). With `srun --no-kill` Slurm
    declares the node failed and the job goes on: the right result, srun exits 0. (The job
    ends only once srun has reported the failure: its computation alone could end first.)"""
    from harness.slurm import SlurmCluster

    with SlurmCluster(tmp_path / "slurm", nodes=3, cpus=4, slurmd_timeout=6) as slurm:
        env = {**cluster_env, **slurm.env}
        hold, release = tmp_path / "hold.json", tmp_path / "release"
        argv = ["srun", "-N", "3", "--ntasks-per-node", "1", "--no-kill", "--kill-on-bad-exit=0"]
        argv += [*start_cluster(), "cpu", "1", *OPTS, "--timeout", "60", "--"]
        argv += [sys.executable, str(FAULTY.parent / "node_loss.py"), str(hold), str(release)]
        run = Background(argv, env, tmp_path)
        wait_for(hold.exists, 60, what="the computation under way")
        rank = psutil.Process(rank_pids()[2])
        stepd = rank.parent()
        assert "slurmstepd" in " ".join(stepd.cmdline()), stepd.cmdline()
        slurmd = int((slurm.root / "run" / "slurmd-node3.pid").read_text())
        killed = time.monotonic()
        for pid in [slurmd, stepd.pid, *kill_rank(2)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        run.wait_text("srun: error: Node failure on node3", 60)  # the job still running
        release.write_text("")
        code = run.wait(120)
        result = node_loss_result(run.stdout)
        assert result["result"] == result["expected"], run.output()
        assert result["workers_after"] == ["0", "1"], run.output()
        assert len(re.findall(r"warning: rank 2 on \S+ was lost", run.stderr)) == 1
        assert code == 0, run.output()
        gone = all_gone()
    record(
        "a node lost (its rank, slurmstepd and slurmd killed)",
        "srun --no-kill",
        gone - killed,
        "kill -> result right and every process gone",
        f"Slurm marks the node failed, the job goes on; srun exits {code}",
    )
