"""Tests of the test harness itself: real launchers, emulated launchers, Slurm, leak checks.

They pin down what each launcher puts in a rank's environment (notes/launchers.md), so the
start-cluster tests can rely on the harness.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.emulate import (
    emulated_cobalt,
    emulated_jsrun,
    emulated_pals,
    emulated_sbatch_leak,
)
from harness.mpi import mpich, mpich_nodes, openmpi, openmpi_nodes
from harness.procs import TAG_VAR, LeakError, check_no_leaks, pid_alive, tagged_pids
from harness.slurm import SlurmCluster
from harness.waiting import WaitTimeout, wait_for

PREFIXES = (
    "SLURM", "OMPI_COMM_WORLD", "PMIX_RANK", "PMI_", "MPI_LOCAL", "PALS_", "JSM_", "LSB_",
    "PBS_", "COBALT_", "CUDA_VISIBLE_DEVICES", "DASK_HPC_",
)


def dump(outdir: Path) -> list[str]:
    """argv that writes this rank's launcher variables to ``outdir/<pid>.json`` (files, not
    stdout: launchers forward output in chunks and interleave long lines)."""
    outdir.mkdir(parents=True, exist_ok=True)
    code = (
        "import os, json; e = {k: v for k, v in os.environ.items() "
        f"if k.startswith({PREFIXES!r})}}; "
        f"open(os.path.join({str(outdir)!r}, f'{{os.getpid()}}.json'), 'w').write(json.dumps(e))"
    )
    return [sys.executable, "-S", "-c", code]


def ranks(outdir: Path) -> list[dict[str, str]]:
    """The environments written by :func:`dump`."""
    return [json.loads(f.read_text()) for f in sorted(outdir.glob("*.json"))]


def launch(run_cmd, prefix: list[str], outdir: Path, **kw) -> list[dict[str, str]]:
    """Run ``prefix + dump(outdir)`` (must succeed) and return the ranks' environments."""
    run_cmd([*prefix, *dump(outdir)], timeout=kw.pop("timeout", 60), **kw).check()
    return ranks(outdir)


def by(envs: list[dict[str, str]], key: str) -> dict[int, dict[str, str]]:
    """Index rank environments by an integer variable; it must be unique."""
    out = {int(e[key]): e for e in envs}
    assert len(out) == len(envs), f"{key} not unique: {envs}"
    return out


# ------------------------------------------------------------------ leak detection, run_cmd
def test_leak_detector_catches_leaked_sleep(test_tag: str) -> None:
    """A deliberately leaked ``sleep`` (in its own session) is found, named and killed."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        wait_for(lambda: proc.pid in tagged_pids(test_tag), 5, what="sleep exec'd")
        with pytest.raises(LeakError, match=r"sleep 300"):
            check_no_leaks(test_tag, timeout=0.3)
        assert proc.wait(timeout=10) == -9
        assert proc.pid not in tagged_pids(test_tag)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_leak_detector_waits_for_exiting_process(test_tag: str) -> None:
    """A process that ends within the grace period is not a leak."""
    proc = subprocess.Popen(["sleep", "0.5"])
    check_no_leaks(test_tag, timeout=10)
    assert proc.wait(timeout=5) == 0


def test_run_cmd_timeout_kills_process_group(run_cmd, test_tag: str) -> None:
    """A hard timeout TERMs (then KILLs) the whole group, children included."""
    t0 = time.monotonic()
    res = run_cmd(["sh", "-c", "sleep 300 & sleep 300 & wait"], timeout=1)
    assert res.timed_out and res.returncode != 0
    assert time.monotonic() - t0 < 10
    wait_for(lambda: not tagged_pids(test_tag), 5, what="group gone")


def test_run_cmd_passes_tag_and_loopback(run_cmd, test_tag: str) -> None:
    res = run_cmd(["env"], timeout=10).check()
    assert f"{TAG_VAR}={test_tag}" in res.stdout.splitlines()
    assert "OMPI_MCA_oob_tcp_if_include=lo" in res.stdout.splitlines()


def test_wait_for_times_out() -> None:
    t0 = time.monotonic()
    with pytest.raises(WaitTimeout, match="never"):
        wait_for(lambda: False, 0.3, what="never")
    assert 0.25 < time.monotonic() - t0 < 2
    assert wait_for(lambda: 42, 1) == 42


# ------------------------------------------------------------------ Slurm (real)
@pytest.mark.slurm
def test_srun_two_nodes_rank_variables(
    slurm_cluster: SlurmCluster, run_cmd, slurm_env, tmp_path: Path
) -> None:
    """srun over 2 emulated nodes: PROCID global, LOCALID and NODEID per node, tag propagated."""
    envs = by(launch(run_cmd, ["srun", "-N2", "-n6", "--ntasks-per-node=3"], tmp_path,
                     env=slurm_env), "SLURM_PROCID")
    assert sorted(envs) == list(range(6))
    layout = {r: (e["SLURM_NODEID"], e["SLURM_LOCALID"], e["SLURMD_NODENAME"])
              for r, e in envs.items()}
    assert layout == {r: (str(r // 3), str(r % 3), f"node{r // 3 + 1}") for r in range(6)}
    for e in envs.values():
        assert e["SLURM_STEP_NUM_TASKS"] == "6"
        assert e["SLURM_NTASKS"] == "6"
        assert e["SLURM_STEP_TASKS_PER_NODE"] == "3(x2)"
        assert e[TAG_VAR] == slurm_env[TAG_VAR]
        assert "SLURM_STEP_ID" in e and "SLURM_JOB_ID" in e
    assert envs[0]["SLURM_GTIDS"] == "0,1,2" and envs[5]["SLURM_GTIDS"] == "3,4,5"


@pytest.mark.slurm
def test_sbatch_script_and_srun_inside(slurm_cluster: SlurmCluster, slurm_env, tmp_path) -> None:
    """The batch script itself leaks SLURM_PROCID=0 and the job's SLURM_NTASKS; srun inside
    gives the real ranks; no SLURM_STEP_ID in the script (it is the batch step)."""
    in_script = shlex.join(dump(tmp_path / "script"))
    in_step = shlex.join(dump(tmp_path / "step"))
    job = slurm_cluster.sbatch(
        f"#!/bin/sh\n{in_script}\nsrun {in_step}\n", ["-N2", "-n4", "--ntasks-per-node=2"],
        env=slurm_env,
    )
    state, code = slurm_cluster.wait_job(job, timeout=60)
    out = slurm_cluster.job_output(job)
    assert (state, code) == ("COMPLETED", 0), out
    [script] = ranks(tmp_path / "script")
    steps = by(ranks(tmp_path / "step"), "SLURM_PROCID")
    assert script["SLURM_PROCID"] == "0" and script["SLURM_NTASKS"] == "4"
    assert "SLURM_STEP_NUM_TASKS" not in script
    assert script["SLURM_JOB_ID"] == job
    assert sorted(steps) == [0, 1, 2, 3]
    assert {e["SLURM_NODEID"] for e in steps.values()} == {"0", "1"}
    assert {e["SLURM_LOCALID"] for e in steps.values()} == {"0", "1"}


@pytest.mark.slurm
@pytest.mark.mpi
@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
def test_sbatch_mpiexec_leaks_slurm_procid(
    impl: str, slurm_cluster: SlurmCluster, slurm_env, tmp_path: Path
) -> None:
    """mpiexec inside an sbatch script: every rank has SLURM_PROCID=0 besides its MPI rank."""
    cmd = shlex.join((openmpi(3) if impl == "openmpi" else mpich(3)) + dump(tmp_path))
    job = slurm_cluster.sbatch(f"#!/bin/sh\n{cmd}\n", ["-N1", "-n3"], env=slurm_env)
    state, code = slurm_cluster.wait_job(job, timeout=90)
    out = slurm_cluster.job_output(job)
    assert (state, code) == ("COMPLETED", 0), out
    key = "OMPI_COMM_WORLD_RANK" if impl == "openmpi" else "PMI_RANK"
    envs = by(ranks(tmp_path), key)
    assert sorted(envs) == [0, 1, 2]
    for e in envs.values():
        assert e["SLURM_PROCID"] == "0", e  # the leak
        assert e["SLURM_JOB_ID"] == job
        assert e["SLURM_STEP_ID"] == "0"  # a step id, though srun did not start the ranks
        # Open MPI starts its orted through srun (a 1-task step); hydra keeps the job's count.
        assert e["SLURM_NTASKS"] == ("1" if impl == "openmpi" else "3")


@pytest.mark.slurm
def test_scancel_terms_then_kills_step(slurm_cluster: SlurmCluster, slurm_env, tmp_path) -> None:
    """scancel: the step's tasks get SIGTERM; one ignoring it is SIGKILLed after KillWait."""
    marker = tmp_path / "got-term"
    ready = tmp_path / "ready"
    script = (
        "#!/bin/sh\n"
        f"srun -n2 sh -c 'if [ $SLURM_PROCID = 0 ]; then trap \"touch {marker}; exit 0\" TERM; "
        f"else trap \"\" TERM; fi; touch {ready}.$SLURM_PROCID; "
        "while :; do sleep 0.1; done'\n"
    )
    job = slurm_cluster.sbatch(script, ["-n2"], env=slurm_env)
    wait_for(lambda: all(Path(f"{ready}.{i}").exists() for i in (0, 1)), 30, what="tasks up")
    t0 = time.monotonic()
    slurm_cluster.scancel(job)
    state, _ = slurm_cluster.wait_job(job, timeout=slurm_cluster.kill_wait + 30)
    elapsed = time.monotonic() - t0
    assert state == "CANCELLED"
    wait_for(marker.exists, 10, what="SIGTERM handler ran")
    # The task that ignored SIGTERM only died at SIGKILL, KillWait seconds later.
    wait_for(lambda: not tagged_pids(slurm_env[TAG_VAR]), 15, what="tasks gone")
    assert elapsed >= slurm_cluster.kill_wait - 1 or not tagged_pids(slurm_env[TAG_VAR])


@pytest.mark.slurm
def test_srun_kill_on_bad_exit(slurm_cluster: SlurmCluster, run_cmd, slurm_env) -> None:
    """srun --kill-on-bad-exit=1: one rank failing ends the others at once."""
    t0 = time.monotonic()
    res = run_cmd(
        ["srun", "--kill-on-bad-exit=1", "-N2", "-n3", "sh", "-c",
         "if [ $SLURM_PROCID = 1 ]; then exit 3; fi; exec sleep 120"],
        env=slurm_env, timeout=60,
    )
    assert not res.timed_out
    assert res.returncode != 0
    assert time.monotonic() - t0 < 30


# ------------------------------------------------------------------ MPI (real)
@pytest.mark.mpi
def test_openmpi_local(run_cmd, tmp_path: Path) -> None:
    envs = by(launch(run_cmd, openmpi(3), tmp_path), "OMPI_COMM_WORLD_RANK")
    assert sorted(envs) == [0, 1, 2]
    for r, e in envs.items():
        assert e["OMPI_COMM_WORLD_SIZE"] == "3" and e["OMPI_COMM_WORLD_LOCAL_RANK"] == str(r)
        assert e["PMIX_RANK"] == str(r)
        assert not any(k.startswith(("PMI_", "SLURM_")) for k in e), e


@pytest.mark.mpi
def test_openmpi_made_up_hosts_local_ranks(run_cmd, tmp_path: Path) -> None:
    """Open MPI over 2 made-up hosts (fake-rsh): local ranks restart on each host."""
    envs = by(launch(run_cmd, openmpi_nodes(2, 3), tmp_path), "OMPI_COMM_WORLD_RANK")
    assert sorted(envs) == list(range(6))
    assert [envs[r]["OMPI_COMM_WORLD_LOCAL_RANK"] for r in range(6)] == list("012012")
    assert {e["OMPI_COMM_WORLD_LOCAL_SIZE"] for e in envs.values()} == {"3"}


@pytest.mark.mpi
def test_mpich_made_up_hosts_local_ranks(run_cmd, tmp_path: Path) -> None:
    envs = by(launch(run_cmd, mpich_nodes(2, 2), tmp_path), "PMI_RANK")
    assert sorted(envs) == [0, 1, 2, 3]
    assert [envs[r]["MPI_LOCALRANKID"] for r in range(4)] == list("0101")
    for e in envs.values():
        assert e["PMI_SIZE"] == "4" and e["MPI_LOCALNRANKS"] == "2"
        assert "PMI_LOCAL_RANK" not in e and "OMPI_COMM_WORLD_RANK" not in e


# ------------------------------------------------------------------ emulated launchers
@pytest.mark.mpi
def test_emulated_pals_variables(run_cmd, tmp_path: Path) -> None:
    envs = by(launch(run_cmd, emulated_pals(tmp_path, nodes=2, ppn=3), tmp_path / "out"),
              "PALS_RANKID")
    assert sorted(envs) == list(range(6))
    for r, e in envs.items():
        assert e["PMI_RANK"] == str(r) and e["PMI_SIZE"] == "6"
        assert e["PALS_LOCAL_RANKID"] == e["PMI_LOCAL_RANK"] == str(r % 3)
        assert e["PALS_NODEID"] == str(r // 3)
        assert e["PMI_LOCAL_SIZE"] == "3"
        assert e["PBS_TASKNUM"] == "1" and e["PBS_NODENUM"] == "0"  # to be ignored
        assert "MPI_LOCALRANKID" not in e and "OMPI_COMM_WORLD_RANK" not in e
        assert not any(k.startswith("DASK_HPC_EMU") for k in e)
    assert len({e["PALS_APID"] for e in envs.values()}) == 1
    nodes = Path(envs[0]["PBS_NODEFILE"]).read_text().split()
    assert len(nodes) == 2 and len(set(nodes)) == 2


@pytest.mark.mpi
@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_emulated_jsrun_variables(mpi: str, run_cmd, tmp_path: Path) -> None:
    argv = emulated_jsrun(tmp_path, nodes=2, ppn=3, gpus_per_task=1, mpi=mpi)
    envs = by(launch(run_cmd, argv, tmp_path / "out"), "JSM_NAMESPACE_RANK")
    assert sorted(envs) == list(range(6))
    for r, e in envs.items():
        assert e["OMPI_COMM_WORLD_RANK"] == e["PMIX_RANK"] == str(r)
        assert e["JSM_NAMESPACE_SIZE"] == e["OMPI_COMM_WORLD_SIZE"] == "6"
        assert e["JSM_NAMESPACE_LOCAL_RANK"] == e["OMPI_COMM_WORLD_LOCAL_RANK"] == str(r % 3)
        assert e["CUDA_VISIBLE_DEVICES"] == str(r % 3)  # jsrun -g1: one device per task
        assert e["LSB_JOBINDEX"] == "0"  # to be ignored
        assert "PMI_RANK" not in e and "MPI_LOCALRANKID" not in e
    hostfile = Path(envs[0]["LSB_DJOB_HOSTFILE"]).read_text().split()
    assert hostfile[0] == "batch1" and len(set(hostfile[1:])) == 2


@pytest.mark.mpi
def test_emulated_cobalt_variables(run_cmd, tmp_path: Path) -> None:
    envs = by(launch(run_cmd, emulated_cobalt(tmp_path, nodes=2, ppn=2), tmp_path / "out"),
              "OMPI_COMM_WORLD_RANK")
    assert sorted(envs) == [0, 1, 2, 3]
    assert [envs[r]["OMPI_COMM_WORLD_LOCAL_RANK"] for r in range(4)] == list("0101")
    nodefile = envs[0]["COBALT_NODEFILE"]
    assert len(Path(nodefile).read_text().split()) == 2
    assert {e["COBALT_JOBID"] for e in envs.values()} == {"10086"}


@pytest.mark.mpi
@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
def test_emulated_sbatch_leak_into_mpiexec(impl: str, run_cmd, tmp_path: Path) -> None:
    """EMULATED sbatch environment around a real mpiexec (told not to use srun: no Slurm)."""
    launcher = openmpi(3, ignore_slurm=True) if impl == "openmpi" else mpich(3, launcher="fork")
    argv = emulated_sbatch_leak(ntasks=3, hydra_step=impl == "mpich") + launcher
    envs = launch(run_cmd, argv, tmp_path)
    assert len(envs) == 3
    assert {e["SLURM_PROCID"] for e in envs} == {"0"}
    key = "OMPI_COMM_WORLD_RANK" if impl == "openmpi" else "PMI_RANK"
    assert sorted(int(e[key]) for e in envs) == [0, 1, 2]


# ------------------------------------------------------------------ a private cluster
@pytest.mark.slurm
def test_private_cluster_up_and_down(tmp_path: Path, test_tag: str) -> None:
    """A second, private cluster starts beside the session one and stops without leftovers."""
    with SlurmCluster(tmp_path / "c", nodes=3, cpus=4) as c:
        pids = c.daemon_pids()
        assert len(pids) == 4
        assert c.startup_seconds is not None  # up: its daemons answered (a wait, not a timing)
        res = c.srun(["-N3", "-n3", "printenv", "SLURMD_NODENAME"], timeout=60).check()
        assert sorted(res.stdout.split()) == ["node1", "node2", "node3"]
        for pid in pids:  # daemons are not test processes
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert TAG_VAR.encode() not in environ
    assert not any(pid_alive(p) for p in pids)


# ------------------------------------------------------------------ a real Flux instance
def test_flux_instance_up_and_down_leaves_nothing(tmp_path: Path, test_tag: str) -> None:
    """Three brokers as three nodes; their tasks carry the environment flux run was given,
    the brokers not the test's tag; stopped, no broker, shell or task of it is left, and a
    job left running is ended with the instance."""
    from harness.flux import FluxInstance

    with FluxInstance(tmp_path / "flux", size=3) as flux:
        brokers = flux.broker_pids()
        assert sorted(brokers) == [0, 1, 2]
        res = flux.command(["run", "-N3", "--tasks-per-node=1", "sh", "-c",
                            f'echo "$FLUX_TASK_RANK $FLUX_JOB_SIZE ${TAG_VAR}"'],
                           env={**os.environ, TAG_VAR: test_tag}).check()
        assert sorted(res.stdout.split("\n")[:-1]) == [f"{r} 3 {test_tag}" for r in range(3)]
        for pid in brokers.values():  # brokers are not test processes
            assert TAG_VAR.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
        running = flux.command(["submit", "sleep", "300"]).check().stdout.strip()
        assert flux.active_jobs() == [str(flux.job(running)["id"])]
        start = flux.proc.pid
    assert not any(pid_alive(p) for p in [start, *brokers.values()])
    assert not (tmp_path / "flux").exists()  # its run directory went with it
