"""start-cluster under a REAL Flux (flux-core 0.88, ``flux start --test-size=3``: three brokers on
this host as three nodes): one rank per node and one per worker, the task map from Flux's PMI,
a node lost for real (its broker killed), GPUs as Flux's job shell hands them out (EMULATED GPU
ids in Flux's resource set), an mpiexec in a ``flux batch`` script, Flux inside a Slurm job,
and bad input. The cases every launcher shares are in test_faults.py and test_launch.py."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from harness.flux import FluxInstance
from harness.mpi import MPICH
from harness.plugin import unwatch_flux_jobs, watch_flux_jobs
from harness.waiting import wait_for
from jobs.background import Background
from support import probe, probe_result, start_cluster

OPTS = ["--interface", "lo", "--dashboard-address", "127.0.0.1:0", "--timeout", "60"]
FAULTY = Path(__file__).resolve().parent / "jobs"


@pytest.fixture
def flux_env(cluster_env: dict[str, str], flux_instance: FluxInstance) -> dict[str, str]:
    return {**cluster_env, **flux_instance.env}


def check(result, workers: int, code: int = 0) -> dict:
    assert result.returncode == code, f"{result.stdout}\n{result.stderr}"
    out = probe_result(result.stdout)
    assert out["n_workers"] == workers
    assert out["sum_squares"] == 328350
    assert result.stderr.count("Dask cluster ready") == 1  # rank 0 only
    return out


def test_one_rank_per_node_and_commands_status(run_cmd, flux_env) -> None:
    """The issue's line: flux run -N2 --tasks-per-node=1 start-cluster cpu 2 -- COMMAND."""
    argv = ["flux", "run", "-N2", "--tasks-per-node=1", *start_cluster(), "cpu", "2", *OPTS]
    result = run_cmd([*argv, "--", *probe("5")], env=flux_env, timeout=120)
    out = check(result, 4, code=5)  # COMMAND's status is the job's
    assert out["names"] == ["0-0", "0-1", "1-0", "1-1"]
    assert "flux-job: task(s) exited with exit code 5" in result.stderr


def test_one_rank_per_worker_each_on_its_own_core(run_cmd, flux_env) -> None:
    """flux run -N2 -n4 with per-task affinity: four ranks, a worker each, each worker on the
    one core Flux bound its task to."""
    argv = ["flux", "run", "-N2", "-n4", "-o", "cpu-affinity=per-task", *start_cluster(),
            "cpu", "2", *OPTS, "--", *probe()]
    out = check(run_cmd(argv, env=flux_env, timeout=120), 4)
    assert out["names"] == ["0", "1", "2", "3"]
    cpus = sorted(w["cpus"] for w in out["workers"].values())
    assert cpus == [[0], [0], [1], [1]], cpus  # two per node, one core each


def test_uneven_tasks_are_read_from_fluxs_task_map(run_cmd, flux_env) -> None:
    """flux run -N3 -n5: 2+2+1 tasks (5 over 3 nodes does not divide: only the task map from
    Flux's PMI says it); 2 on a node against WORKERS_PER_NODE 1 is one line per such rank."""
    argv = ["flux", "run", "-N3", "-n5", *start_cluster(), "cpu", "1", *OPTS, "--", "true"]
    result = run_cmd(argv, env=flux_env, timeout=60)
    assert result.returncode != 0
    said = re.findall(r"^start-cluster: error: this node runs 2 ranks but WORKERS_PER_NODE is 1",
                      result.stderr, re.M)
    assert len(said) == 4, result.stderr  # ranks 0-3, on the two nodes of two
    assert "cannot tell how many tasks" not in result.stderr
    assert "Traceback" not in result.stderr and "ready" not in result.stderr


def test_more_nodes_than_flux_has_is_one_line_and_nothing_starts(run_cmd, flux_env) -> None:
    argv = ["flux", "run", "-N5", "--tasks-per-node=1", *start_cluster(), "cpu", "1", *OPTS,
            "--", "true"]
    result = run_cmd(argv, env=flux_env, timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "unsatisfiable request: need 5 exclusive node(s), only 3 eligible" in lines[0]
    assert "start-cluster" not in result.stdout + result.stderr  # no rank ever ran


def test_a_rank_with_fewer_cpus_than_workers_is_refused_with_fluxs_fix(run_cmd, flux_env):
    """A Flux task runs on the cores it was given (one unless -c): never widened."""
    one = run_cmd(["flux", "run", "-N1", "-n1", *start_cluster(), "cpu", "2", *OPTS, "--", "true"],
                  env=flux_env, timeout=60)
    assert one.returncode == 2, one.stderr
    assert "give it a CPU per worker: flux run --cores-per-task=2" in one.stderr, one.stderr
    two = run_cmd(["flux", "run", "-N1", "-n1", "-c2", *start_cluster(), "cpu", "2", *OPTS, "--",
                   *probe()], env=flux_env, timeout=120)
    assert [w["cpus"] for w in check(two, 2)["workers"].values()] == [[0, 1], [0, 1]]


@pytest.fixture
def lonely_flux(tmp_path: Path):
    """A Flux instance of this test alone: a node of it is killed."""
    instance = FluxInstance(tmp_path / "flux", size=3).start()
    watch_flux_jobs(instance)
    try:
        yield instance
    finally:
        unwatch_flux_jobs(instance)
        instance.stop()


def test_a_node_lost_under_flux_keeps_the_job(lonely_flux, cluster_env, tmp_path) -> None:
    """A whole node dies: its broker, the job shell on it, its rank and that rank's processes.
    Flux ends a job that loses a node unless the node is not critical: rank 0 made its own the
    only critical one; with exit-timeout=none (a rank's end does not end the job) the job
    goes on, Dask recomputes, COMMAND's result is right and flux run exits 0."""
    env = {**cluster_env, **lonely_flux.env}
    hold = tmp_path / "hold.json"
    argv = ["flux", "run", "-N3", "--tasks-per-node=1", "-o", "exit-timeout=none",
            *start_cluster(), "cpu", "1", *OPTS, "--death-timeout", "5", "--",
            sys.executable, str(FAULTY / "node_loss.py"), str(hold)]
    run = Background(argv, env, tmp_path)
    run.wait_text("Dask cluster ready", 60)
    wait_for(hold.exists, 60, what="the computation under way")
    lonely_flux.kill_node(2)
    code = run.wait(120)
    out = run.stdout
    result = next(line for line in out.splitlines() if line.startswith("NODELOSS "))
    assert '"workers_after": ["0", "1"]' in result, run.output()
    loss = json.loads(result.split(" ", 1)[1])
    assert loss["result"] == loss["expected"], run.output()
    assert len(re.findall(r"warning: rank 2 on \S+ was lost", run.stderr)) == 1, run.output()
    assert "type=node-failure severity=2" in run.stderr, run.output()  # not fatal (0)
    assert "command exited with status 0: shutting down" in run.stderr, run.output()
    assert code == 0, run.output()


def test_abort_on_node_loss_leaves_fluxs_own_default(lonely_flux, cluster_env, tmp_path):
    """--abort-on-node-loss: rank 0 sends Flux nothing, and Flux ends the job on the node's
    loss itself (severity 0), as it does for any job."""
    env = {**cluster_env, **lonely_flux.env}
    hold = tmp_path / "hold.json"
    argv = ["flux", "run", "-N3", "--tasks-per-node=1", "-o", "exit-timeout=none",
            *start_cluster(), "cpu", "1", *OPTS, "--abort-on-node-loss", "--",
            sys.executable, str(FAULTY / "faulty.py"), "hold", str(hold)]
    run = Background(argv, env, tmp_path)
    wait_for(hold.exists, 60, what="COMMAND")
    lonely_flux.kill_node(2)
    code = run.wait(60)
    assert code != 0, run.output()
    assert "node failure" in run.stderr and "severity=0" in run.stderr, run.output()


def test_without_flux_on_rank_0s_path_a_lost_node_would_end_the_job_and_it_says_so(
    run_cmd, flux_env
) -> None:
    """Rank 0 asks Flux through `flux`: where it cannot (a container without it), one line."""
    path = ":".join(p for p in flux_env["PATH"].split(":") if not Path(p, "flux").exists())
    argv = ["flux", "run", "-N2", "--tasks-per-node=1", f"--env=PATH={path}", *start_cluster(),
            "cpu", "1", *OPTS, "--", "true"]
    result = run_cmd(argv, env=flux_env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("warning: flux is not on PATH here (a container?): a lost node "
                               "ends this Flux job") == 1, result.stderr


def test_a_flux_module_planted_in_the_jobs_directory_never_runs(
    run_cmd, flux_env, tmp_path
) -> None:
    """Rank 0's request to Flux runs in the job's working directory (often one its group can
    write): a flux.py planted there is not what it imports."""
    planted = tmp_path / "shared-project"
    planted.mkdir()
    marker = tmp_path / "planted-ran"
    (planted / "flux.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    argv = ["flux", "run", "-N2", "--tasks-per-node=1", f"--cwd={planted}", *start_cluster(),
            "cpu", "1", *OPTS, "--", "true"]
    result = run_cmd(argv, env=flux_env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), "the planted flux.py ran"
    assert "Flux refused" not in result.stderr and "warning" not in result.stderr, result.stderr


def test_gpu_worker_per_rank_on_fluxs_gpus_emulated(run_cmd, cluster_env, tmp_path) -> None:
    """flux run -n2 -g1 on a node of 2 EMULATED GPUs (Flux's resource set; no device here):
    Flux's job shell gives each task CUDA_VISIBLE_DEVICES=0,1 (its node's GPUs: the default
    gpu-affinity=on), or one GPU each (gpu-affinity=per-task). On an AMD site (El Capitan's
    profile) each worker gets its GPU by local rank in ROCR_VISIBLE_DEVICES, HIP's variable
    then pointing at its one device; a GPU Flux already narrowed to one is kept."""
    with FluxInstance(tmp_path / "flux", size=1, gpus=2, cores=2) as flux:
        watch_flux_jobs(flux)
        try:
            env = {**cluster_env, **flux.env}
            base = ["flux", "run", "-N1", "-n2", "-g1"]
            tail = [*start_cluster(), "gpu", "2", "--site", "elcapitan", *OPTS,
                    "--local-directory", str(tmp_path / "local"), "--", *probe()]
            shared = check(run_cmd([*base, *tail], env=env, timeout=120), 2)
            per_task = check(run_cmd([*base, "-o", "gpu-affinity=per-task", *tail], env=env,
                                     timeout=120), 2)
        finally:
            unwatch_flux_jobs(flux)
    pinned = {name: w["env"] for name, w in shared["workers"].items()}
    assert pinned == {
        "0": {"ROCR_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"},
        "1": {"ROCR_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"},
    }, pinned
    kept = {name: w["env"] for name, w in per_task["workers"].items()}
    assert kept == {"0": {"CUDA_VISIBLE_DEVICES": "0"}, "1": {"CUDA_VISIBLE_DEVICES": "1"}}, kept


def test_a_gpu_worker_without_a_gpu_from_flux_is_one_line(run_cmd, flux_env, tmp_path) -> None:
    """A Flux job given no GPU: Flux sets CUDA_VISIBLE_DEVICES=-1 in it."""
    argv = ["flux", "run", "-N1", "-n1", *start_cluster(), "gpu", "1", "--site", "elcapitan",
            *OPTS, "--", "true"]
    result = run_cmd(argv, env=flux_env, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("start-cluster:")]
    assert lines == [
        "start-cluster: error: the launcher gave this rank no GPU (CUDA_VISIBLE_DEVICES=-1); "
        "ask it for one per gpu worker (flux run --gpus-per-task=1, srun --gpus-per-task=1)"
    ], result.stderr


def test_mpich_mpiexec_in_a_flux_batch_script(flux_instance, flux_env, tmp_path) -> None:
    """A flux batch script's mpiexec (MPICH hydra): its ranks are MPICH's, in the batch job."""
    out = tmp_path / "job.out"
    line = shlex.join([MPICH, "-launcher", "fork", "-n", "2", *start_cluster(), "cpu", "2",
                       *OPTS, "--", *probe()])
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#FLUX: --nodes=1\n#FLUX: --output={out}\n{line}\n")
    submitted = flux_instance.command(["batch", str(script)], env=flux_env).check()
    job = flux_instance.wait_job(submitted.stdout.strip(), 120)
    text = out.read_text()
    assert job["result"] == "COMPLETED", text
    result = probe_result(text)
    assert result["n_workers"] == 2 and result["names"] == ["0", "1"], text


def test_flux_started_by_srun_runs_flux_ranks(slurm_cluster, flux_env, tmp_path) -> None:
    """Flux inside a Slurm job (srun starts the instance): its jobs' tasks inherit the
    broker's SLURM_PROCID=0, and are Flux's ranks all the same."""
    env = {**flux_env, **slurm_cluster.env}
    del env["FLUX_URI"]  # a new instance, inside the Slurm job
    flux = env["PATH"].split(":")[0] + "/flux"
    inner = ["flux", "run", "-N2", "--tasks-per-node=1", *start_cluster(), "cpu", "1", *OPTS,
             "--", *probe()]
    result = slurm_cluster.srun(
        ["-N", "1", "-n", "1", flux, "start", "--test-size=2", *inner], env=env, timeout=120
    )
    assert check(result, 2)["names"] == ["0", "1"]  # one worker per rank, on two brokers
