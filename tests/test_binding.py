"""CPU binding: a rank that starts several workers runs them on the CPUs they need.

Real Open MPI (whose default binds a lone rank to one core), real MPICH, real Slurm with
``task/affinity`` (a task's CPUs are its allocation), and EMULATED PALS ``--cpu-bind list:``
(taskset over hydra). The workers', scheduler's and COMMAND's real affinity is read back.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness.emulate import emulated_pals
from harness.mpi import MPICH, OPENMPI_BASE
from harness.slurm import SlurmCluster
from support import probe, probe_result, start_cluster

OPTS = ["--interface", "lo", "--dashboard-address", "127.0.0.1:0", "--timeout", "60"]
ALL = sorted(os.sched_getaffinity(0))
WIDENED = "the launcher bound this rank to CPU(s) 0 (its default): widened to"



def test_this_machine_has_the_two_cpus_these_tests_need() -> None:
    assert len(ALL) >= 2, f"the binding tests need 2 CPUs; this process may use {ALL}"


def run_probe(run_cmd, env, prefix: list[str], workers: int):
    argv = [*prefix, *start_cluster(), "cpu", str(workers), *OPTS, "--", *probe()]
    return run_cmd(argv, env=env, timeout=120)


@pytest.mark.parametrize("workers", [2, 4])
def test_open_mpis_default_binding_of_a_lone_rank_is_widened(run_cmd, cluster_env, workers: int):
    result = run_probe(run_cmd, cluster_env, [*OPENMPI_BASE, "-n", "1"], workers)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(WIDENED) == 1, result.stderr
    out = probe_result(result.stdout)
    assert [w["cpus"] for w in out["workers"].values()] == [ALL] * workers
    assert out["command_cpus"] == ALL and out["scheduler_cpus"] == ALL
    assert {w["nthreads"] for w in out["workers"].values()} == {max(1, len(ALL) // workers)}


def test_a_binding_the_user_chose_is_kept_when_it_has_a_cpu_per_worker(run_cmd, cluster_env):
    prefix = [*OPENMPI_BASE, "-n", "1", "--bind-to", "none"]
    result = run_probe(run_cmd, cluster_env, prefix, 2)
    assert result.returncode == 0, result.stderr
    assert "widened" not in result.stderr
    assert [w["cpus"] for w in probe_result(result.stdout)["workers"].values()] == [ALL] * 2


def test_one_worker_per_rank_keeps_each_ranks_core(run_cmd, cluster_env):
    """Open MPI binds 2 ranks to a core each: each worker keeps its rank's core."""
    result = run_probe(run_cmd, cluster_env, [*OPENMPI_BASE, "-n", "2"], 2)
    assert result.returncode == 0, result.stderr
    out = probe_result(result.stdout)
    assert sorted(w["cpus"] for w in out["workers"].values()) == [[0], [1]]
    assert {w["nthreads"] for w in out["workers"].values()} == {1}


@pytest.mark.parametrize(
    "launcher, prefix, fix",
    [
        ("openmpi", [*OPENMPI_BASE, "-n", "1", "--bind-to", "core"], "mpiexec --bind-to none"),
        ("mpich", [MPICH, "-bind-to", "core", "-n", "1"], "mpiexec without -bind-to"),
    ],
)
def test_a_chosen_binding_with_too_few_cpus_is_refused_in_one_line(
    run_cmd, cluster_env, launcher: str, prefix: list[str], fix: str
):
    result = run_cmd([*prefix, *start_cluster(), "cpu", "2", *OPTS, "--", "true"],
                     env=cluster_env, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("start-cluster:")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "start-cluster: error: the launcher gave this rank 1 CPU(s) (0) but it starts 2 "
        f"workers; give it a CPU per worker: {fix}"
    ), result.stderr
    assert "Traceback" not in result.stderr and "ready" not in result.stderr


def test_mpich_does_not_bind(run_cmd, cluster_env):
    result = run_probe(run_cmd, cluster_env, [MPICH, "-n", "1"], 2)
    assert result.returncode == 0, result.stderr
    assert "widened" not in result.stderr
    assert [w["cpus"] for w in probe_result(result.stdout)["workers"].values()] == [ALL] * 2


def test_emulated_pals_cpu_bind_list_with_too_few_cpus_is_refused(run_cmd, cluster_env, tmp_path):
    prefix = emulated_pals(tmp_path, nodes=1, ppn=1, cpu_bind="list:0")
    result = run_cmd([*prefix, *start_cluster(), "cpu", "2", *OPTS, "--", "true"],
                     env=cluster_env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "give it a CPU per worker: mpiexec --cpu-bind none, or --depth=2" in result.stderr
    unbound = run_probe(run_cmd, cluster_env, emulated_pals(tmp_path, nodes=1, ppn=1), 2)
    assert unbound.returncode == 0, unbound.stderr
    assert [w["cpus"] for w in probe_result(unbound.stdout)["workers"].values()] == [ALL] * 2


def test_srun_tasks_run_on_their_allocation(run_cmd, cluster_env, tmp_path: Path):
    """Slurm with task/affinity binds a task to the CPUs it was allocated (one, by default):
    never widened (the rest of a shared node may be another job's), asked for instead."""
    extra = "TaskPlugin=task/affinity\nTaskPluginParam=Cores"
    with SlurmCluster(tmp_path / "slurm", nodes=1, cpus=len(ALL), extra_conf=extra) as slurm:
        env = {**cluster_env, **slurm.env}
        one = run_cmd(["srun", "-n", "1", *start_cluster(), "cpu", "2", *OPTS, "--", "true"],
                      env=env, timeout=60)
        assert one.returncode == 2, one.stderr
        assert "give it a CPU per worker: srun --cpus-per-task=2" in one.stderr, one.stderr
        two = run_probe(run_cmd, env, ["srun", "-n", "1", "-c", str(len(ALL))], 2)
        assert two.returncode == 0, two.stderr
        assert [w["cpus"] for w in probe_result(two.stdout)["workers"].values()] == [ALL] * 2
