"""HPCCluster on a real Slurm: whole jobs up and down, data kept, queued jobs, lost jobs."""

from __future__ import annotations

import operator
import os
import re
import shutil
import stat
import sys
import threading

import pytest
from distributed import Client, wait
from distributed.security import Security
from elastic_support import computed_twice, worker_names

pytestmark = pytest.mark.slurm


def test_scale_by_jobs_with_tls_and_down_keeping_every_result(
    make_cluster, elastic_slurm, wait_for
) -> None:
    cluster = make_cluster("cpu", workers_per_node=2, walltime="00:10:00")
    script = cluster.job_script()
    assert "#SBATCH --ntasks-per-node=2" in script
    assert re.search(
        r"^srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --no-kill "
        r"--kill-on-bad-exit=0 \S+ -P -m dask_hpc cpu 2 --join "
        rf"{cluster.scheduler_file} --name-prefix {cluster.cluster_id}-cpu-1 --site generic$",
        script,
        re.M,
    ), script
    # TLS only, with files only the owner reads; no certificate, no connection.
    assert cluster.scheduler_address.startswith("tls://")
    assert stat.S_IMODE(cluster.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((cluster.directory / "cluster.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(cluster.scheduler_file.stat().st_mode) == 0o600
    with pytest.raises((OSError, TimeoutError)):  # another CA's certificate is refused
        Client(cluster.scheduler_address, security=Security.temporary(), timeout=3)

    cluster.scale(3)  # 3 workers: 2 jobs of 2
    client = cluster.get_client()
    client.wait_for_workers(4, timeout=120)
    names = worker_names(client)
    assert {n.rsplit("-", 1)[0] for n in names} == {
        f"{cluster.cluster_id}-cpu-1",
        f"{cluster.cluster_id}-cpu-2",
    }, names
    futures = client.map(operator.add, range(400), [1] * 400)
    wait(futures)

    cluster.scale(jobs=1)
    (retired,) = [j for j in cluster.jobs.values() if j.retiring]
    wait_for(lambda: len(worker_names(client)) == 2, 60, what="2 workers left")
    assert client.gather(futures) == list(range(1, 401))
    assert computed_twice(cluster) == []
    # The retired job's ranks ended by themselves: the job completed, with status 0.
    assert elastic_slurm.wait_job(retired.job_id, 60) == ("COMPLETED", 0)
    wait_for(lambda: retired.name not in cluster.jobs, 10, what="the cluster to see it end")
    client.close()


def test_queued_jobs_count_and_are_cancelled_before_running_ones_shrink(
    make_cluster, elastic_slurm, wait_for
) -> None:
    cluster = make_cluster(
        "cpu", workers_per_node=1, walltime="00:10:00", job_directives=["--exclusive"]
    )
    pool = cluster.pools["cpu"]
    cluster.scale(jobs=4)  # three nodes: one job waits in the queue
    client = cluster.get_client()
    client.wait_for_workers(3, timeout=120)
    wait_for(lambda: cluster.status_table()[0]["queued"] == 1, 30, what="a queued job")
    rounds = cluster.rounds
    wait_for(lambda: cluster.rounds >= rounds + 4, 30, what="four rounds")
    assert pool.counter == 4  # a queued job counts: nothing was submitted again
    (queued,) = [j.job_id for j in cluster.jobs.values() if j.state == "queued"]

    cluster.scale(jobs=2)
    wait_for(lambda: len(worker_names(client)) == 2, 60, what="2 workers")
    assert elastic_slurm.wait_job(queued, 30)[0] == "CANCELLED"
    wait_for(lambda: len([j for j in cluster.finished if j.ever_connected]) == 1, 30,
             what="the retired job to end")
    retired = [j for j in cluster.finished if j.ever_connected]
    assert elastic_slurm.wait_job(retired[0].job_id, 30) == ("COMPLETED", 0)
    assert pool.counter == 4
    client.close()


def test_a_job_the_batch_system_ends_stops_counting_and_is_replaced(
    make_cluster, elastic_slurm, wait_for
) -> None:
    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:10:00")
    cluster.scale(jobs=2)
    client = cluster.get_client()
    client.wait_for_workers(2, timeout=120)
    victim = next(iter(cluster.jobs.values()))
    elastic_slurm.scancel(victim.job_id)  # the batch system ends it (a node lost, a preemption)
    wait_for(lambda: victim.name not in cluster.jobs, 30, what="the cluster to notice")
    wait_for(
        lambda: len(worker_names(client)) == 2
        and victim.name not in {n.rsplit("-", 1)[0] for n in worker_names(client)},
        120,
        what="a replacement's worker",
    )
    assert cluster.pools["cpu"].counter == 3  # exactly one replacement
    assert client.submit(operator.add, 1, 1).result() == 2
    client.close()


GATED_SBATCH = """#!/bin/sh
# The real sbatch (--parsable SCRIPT), the second call held at a gate after it read the script
# (a slow slurmctld): it says it waits, reads a line from the gate FIFO (120 s at most),
# submits, then leaves the job's id in $GATE/submitted.
n=$(($(cat "$GATE/count" 2>/dev/null || echo 0) + 1)); echo "$n" >"$GATE/count"
cp "$2" "$GATE/script.$n"
[ "$n" = 2 ] && : >"$GATE/waiting" && timeout 120 sh -c 'read line <"$GATE/fifo"'
out=$("$REAL_SBATCH" "$1" "$GATE/script.$n"); code=$?
printf '%s\\n' "$out"
[ "$n" = 2 ] && printf '%s' "$out" >"$GATE/id" && mv "$GATE/id" "$GATE/submitted"
exit "$code"
"""


def test_a_replacement_still_being_submitted_at_close_is_cancelled(
    make_cluster, elastic_slurm, monkeypatch, tmp_path, wait_for
) -> None:
    """close stops the job loop while a replacement's sbatch is still running (CI: a walltime
    replacement's flux batch): the job it submits is found and cancelled, not left to run."""
    gate = tmp_path / "gate"
    (gate / "bin").mkdir(parents=True)
    os.mkfifo(gate / "fifo", 0o600)
    wrapper = gate / "bin" / "sbatch"
    wrapper.write_text(GATED_SBATCH)
    wrapper.chmod(0o700)
    monkeypatch.setenv("REAL_SBATCH", shutil.which("sbatch"))
    monkeypatch.setenv("GATE", str(gate))
    monkeypatch.setenv("PATH", f"{gate / 'bin'}:{os.environ['PATH']}")

    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:10:00")
    cluster.scale(jobs=1)
    cluster.wait_for_workers(1, timeout=120)
    (first,) = cluster.jobs.values()
    elastic_slurm.scancel(first.job_id)  # the loop submits a replacement: held at the gate
    wait_for(lambda: (gate / "waiting").exists(), 60, what="the replacement's sbatch")
    closing = threading.Thread(target=cluster.close)
    closing.start()
    loop_task = cluster._reconciler._task
    wait_for(lambda: loop_task.done() or loop_task.cancelling(), 30, what="close to stop the loop")
    with open(gate / "fifo", "w") as fifo:  # the held sbatch goes on
        fifo.write("go\n")
    closing.join(120)
    assert not closing.is_alive()
    wait_for(lambda: (gate / "submitted").exists(), 60, what="the held sbatch to submit")
    held = (gate / "submitted").read_text().split(";")[0]
    assert held.isdigit(), held
    assert elastic_slurm.wait_job(held, 60)[0] == "CANCELLED"  # by close, before it ran
    wait_for(lambda: not elastic_slurm.jobs(), 60, what="no job left in Slurm")


def test_a_script_that_never_closes_its_cluster_leaves_no_job(run_cmd, shell_env, elastic_slurm):
    code = (
        "from dask_hpc import HPCCluster\n"
        "cluster = HPCCluster('cpu', workers_per_node=1, walltime='00:10:00', quiet=True)\n"
        "cluster.scale(jobs=2)\n"
        "cluster.wait_for_workers(1, timeout=120)\n"
        "print('UP', len(cluster.jobs))\n"
    )
    result = run_cmd([sys.executable, "-c", code], env=shell_env, timeout=240)
    result.check()
    assert "UP 2" in result.stdout
    assert elastic_slurm.jobs() == []  # closed at exit: the running job and the queued one


def test_a_close_that_failed_part_way_leaves_the_cluster_closed(make_cluster, monkeypatch) -> None:
    """A step of close that raises (seen: a job's end read wrongly at close) is said to the
    caller, and the cluster is closed all the same: a second close returns at once (it waited
    for the first forever, a fixture's close hung a test run)."""
    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:10:00")

    async def broken() -> None:
        raise OSError("a step of close failed")  # (Dask's close swallows RuntimeError)

    monkeypatch.setattr(cluster._job_control, "until_jobs_end", broken)
    with pytest.raises(OSError, match="a step of close failed"):
        cluster.close()
    second = threading.Thread(target=cluster.close)
    second.start()
    second.join(30)
    assert not second.is_alive()
    assert cluster.status.name == "closed"
