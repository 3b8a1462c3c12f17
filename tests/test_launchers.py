"""Launcher detection from exact launcher environments (launchers notes), traps included."""

from __future__ import annotations

import pytest

from dask_hpc.errors import UsageError
from dask_hpc.planning import launchers

SBATCH_SCRIPT = {
    "SLURM_JOB_ID": "77",
    "SLURM_PROCID": "0",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_TASKS_PER_NODE": "4(x2)",
}
OPENMPI_RANK = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_NODE_RANK": "1",
    "PMIX_RANK": "5",
    "OMPI_MCA_ess_base_jobid": "1659174913",
}
HYDRA_RANK = {
    "PMI_RANK": "6",
    "PMI_SIZE": "8",
    "MPI_LOCALRANKID": "2",
    "MPI_LOCALNRANKS": "4",
    "PMI_FD": "99999",
}


def detect(env: dict[str, str], override: str | None = None) -> launchers.RankInfo:
    return launchers.detect(env, override, pid=42, host="nodeA")


def test_no_launcher_is_local_mode() -> None:
    info = detect({"HOME": "/home/u"})
    assert (info.launcher, info.rank, info.size, info.local_size) == ("none", 0, 1, 1)
    assert info.launch_id == "local-nodeA-42"


def test_salloc_shell_has_job_variables_only_and_is_no_launch() -> None:
    assert (
        detect({"SLURM_JOB_ID": "12", "SLURM_NTASKS": "4", "SLURM_NNODES": "2"}).launcher == "none"
    )


def test_srun_step() -> None:
    env = {
        "SLURM_JOB_ID": "12",
        "SLURM_STEP_ID": "3",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_TASKS": "6",
        "SLURM_NTASKS": "6",
        "SLURM_STEP_TASKS_PER_NODE": "4,2",
    }
    info = detect(env)
    assert (info.launcher, info.rank, info.local_rank, info.size, info.local_size) == (
        "slurm",
        5,
        1,
        6,
        2,
    )
    assert info.launch_id == "12-3" and info.job_id == "12"


@pytest.mark.parametrize(
    ("spec", "node", "expected"),
    [
        ("4", "0", 4),
        ("2(x3)", "2", 2),
        ("4,1,1", "2", 1),
        ("3(x2),1", "2", 1),
    ],
)
def test_slurm_tasks_per_node_forms(spec: str, node: str, expected: int) -> None:
    assert (
        launchers.slurm_local_size({"SLURM_STEP_TASKS_PER_NODE": spec, "SLURM_NODEID": node})
        == expected
    )


def test_mpiexec_inside_sbatch_is_open_mpi_not_slurm() -> None:
    info = detect({**SBATCH_SCRIPT, **OPENMPI_RANK})
    assert (info.launcher, info.rank, info.local_rank, info.size) == ("openmpi", 5, 1, 8)
    assert info.launch_id.startswith("77-")  # job-scoped


def test_mpich_inside_sbatch_with_hydra_step_id_is_mpich() -> None:
    info = detect({**SBATCH_SCRIPT, "SLURM_STEP_ID": "0", **HYDRA_RANK})
    assert (info.launcher, info.rank, info.local_rank, info.size, info.local_size) == (
        "mpich",
        6,
        2,
        8,
        4,
    )


def test_pals_on_aurora_ignores_pbs_task_variables() -> None:
    env = {
        "PBS_JOBID": "4242.aurora-pbs",
        "PBS_TASKNUM": "1",
        "PBS_NODENUM": "0",
        "PALS_RANKID": "7",
        "PALS_LOCAL_RANKID": "1",
        "PALS_NODEID": "1",
        "PALS_APID": "b2c4",
        "PMI_RANK": "7",
        "PMI_SIZE": "12",
        "PMI_LOCAL_RANK": "1",
        "PMI_LOCAL_SIZE": "6",
    }
    info = detect(env)
    assert (info.launcher, info.rank, info.local_rank, info.size, info.local_size) == (
        "pals",
        7,
        1,
        12,
        6,
    )
    assert info.launch_id == "4242.aurora-pbs-b2c4"


def test_jsrun_with_spectrum_mpi_variables() -> None:
    env = {
        "LSB_JOBID": "991",
        "JSM_NAMESPACE_RANK": "3",
        "JSM_NAMESPACE_LOCAL_RANK": "0",
        "JSM_NAMESPACE_SIZE": "4",
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        "PMIX_RANK": "3",
    }
    info = detect(env)
    assert (info.launcher, info.rank, info.size, info.local_size) == ("jsrun", 3, 4, 1)
    assert info.launch_id.startswith("991")


SRUN_TASK_1_OF_2 = {
    "SLURM_JOB_ID": "5",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "2",
}


def test_srun_cray_shasta_without_pals_local_rank_is_slurm() -> None:
    env = {**SRUN_TASK_1_OF_2, "PALS_RANKID": "1", "PALS_NODEID": "0"}
    assert detect(env).launcher == "slurm"


def test_srun_pmi2_sets_pmi_rank_but_is_slurm() -> None:
    env = {**SRUN_TASK_1_OF_2, "PMI_RANK": "1", "PMI_SIZE": "2"}
    assert detect(env).launcher == "slurm"


def test_override_picks_the_launcher() -> None:
    assert detect({**SBATCH_SCRIPT, **OPENMPI_RANK}, "slurm").launcher == "slurm"
    assert detect(OPENMPI_RANK, "none").launcher == "none"


def test_unknown_launcher_names_the_choices() -> None:
    with pytest.raises(UsageError, match="unknown launcher 'lsf'.*jsrun, pals, openmpi"):
        detect({}, "lsf")


def test_override_without_its_variables_is_a_clear_error() -> None:
    with pytest.raises(UsageError, match="launcher pals: rank variable PALS_RANKID is missing"):
        detect({}, "pals")


def test_inconsistent_ranks_are_rejected() -> None:
    with pytest.raises(UsageError, match="inconsistent rank 9/8"):
        detect({**OPENMPI_RANK, "OMPI_COMM_WORLD_RANK": "9"})


def test_mpich_without_pmi_socket_or_job_cannot_be_identified() -> None:
    with pytest.raises(UsageError, match="nothing in the environment identifies this launch"):
        detect(HYDRA_RANK)


# A task of `flux run -N3 --tasks-per-node=1` (flux-core 0.88.0, measured: tests/setup/flux.sh),
# the variables of Flux's job shell and its pmi and gpu-affinity plugins, less paths.
FLUX_TASK_2_OF_3 = {
    "FLUX_JOB_ID": "ƒUXhfWP",
    "FLUX_JOB_ID_PATH": "/ƒUXhfWP",
    "FLUX_JOB_NNODES": "3",
    "FLUX_JOB_SIZE": "3",
    "FLUX_JOB_TMPDIR": "/tmp/flux-H5nafn/jobtmp-2-ƒUXhfWP",
    "FLUX_KVS_NAMESPACE": "job-18069061632",
    "FLUX_TASK_LOCAL_ID": "0",
    "FLUX_TASK_RANK": "2",
    "FLUX_URI": "local:///tmp/flux-H5nafn/local-2",
    "PMI_FD": "18",
    "PMI_RANK": "2",
    "PMI_SIZE": "3",
    "CUDA_VISIBLE_DEVICES": "-1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}


def test_flux_run_task() -> None:
    info = detect(FLUX_TASK_2_OF_3)
    assert (info.launcher, info.rank, info.local_rank, info.size, info.local_size) == (
        "flux", 2, 0, 3, 1
    )
    # Job-scoped by its place among Flux instances; F58's "ƒ" as ASCII.
    assert info.launch_id == "fUXhfWP" and info.job_id == "ƒUXhfWP"


def test_flux_nested_job_is_named_by_its_path() -> None:
    env = {**FLUX_TASK_2_OF_3, "FLUX_JOB_ID": "ƒ2b", "FLUX_JOB_ID_PATH": "/ƒD2e73NP/ƒ2b"}
    assert detect(env).launch_id == "fD2e73NP_f2b"


@pytest.mark.parametrize(
    ("taskmap", "rank", "expected"),
    [
        ('{"version":1,"map":[[0,2,2,1],[2,1,1,1]]}', "4", (2, 1)),  # flux run -N3 -n5
        ('{"version":1,"map":[[0,2,2,1],[2,1,1,1]]}', "1", (0, 2)),
        ('{"version":1,"map":[[0,2,1,3]]}', "3", (1, 3)),  # --taskmap=cyclic, 6 on 2
        ("not json", "0", (None, 1)),  # then the job's size over its nodes
    ],
)
def test_flux_task_map_gives_node_and_tasks_on_it(taskmap, rank, expected) -> None:
    env = {**FLUX_TASK_2_OF_3, "FLUX_TASK_RANK": rank}
    assert launchers.flux_placement(env, taskmap) == expected


def test_flux_uneven_tasks_without_pmi_is_a_clear_error() -> None:
    env = {**FLUX_TASK_2_OF_3, "FLUX_JOB_SIZE": "5"}  # 5 tasks on 3 nodes, no PMI socket here
    with pytest.raises(UsageError, match="launcher flux: cannot tell how many tasks run"):
        detect(env)


def test_flux_started_by_srun_is_flux_not_slurm() -> None:
    """`srun -N2 flux start`: Flux's jobs inherit the first broker's SLURM_PROCID=0."""
    assert detect({**SRUN_TASK_1_OF_2, **FLUX_TASK_2_OF_3}).launcher == "flux"


def test_flux_started_by_pals_mpiexec_is_flux_not_pals() -> None:
    """`mpiexec -n 3 --ppn 1 flux start` under PBS: Flux's jobs inherit the first broker's
    PALS variables; Flux sets PMI_RANK/PMI_SIZE anew."""
    pals_rank_0 = {
        "PBS_JOBID": "4242.aurora-pbs",
        "PALS_RANKID": "0",
        "PALS_LOCAL_RANKID": "0",
        "PALS_NODEID": "0",
        "PALS_APID": "b2c4",
        "PMI_LOCAL_RANK": "0",
        "PMI_LOCAL_SIZE": "1",
    }
    info = detect({**pals_rank_0, **FLUX_TASK_2_OF_3})
    assert (info.launcher, info.rank, info.size) == ("flux", 2, 3)


# What a `flux batch` script sees (measured): the batch job is a Flux instance whose first broker
# runs the script, with none of a task's variables.
FLUX_BATCH_SCRIPT = {
    "FLUX_ENCLOSING_ID": "fwAWm9h",
    "FLUX_URI": "local:///tmp/flux-L4hIBW/local-0",
    "FLUX_TERMINUS_SESSION": "0",
    "CUDA_VISIBLE_DEVICES": "-1",
}


def test_mpiexec_inside_a_flux_batch_script_is_mpich_scoped_by_the_batch_job() -> None:
    hydra = {k: v for k, v in HYDRA_RANK.items() if k != "PMI_FD"}
    info = detect({**FLUX_BATCH_SCRIPT, **hydra})
    assert (info.launcher, info.rank, info.local_rank, info.size) == ("mpich", 6, 2, 8)
    assert info.launch_id == "fwAWm9h"


def test_mpiexec_inside_a_flux_job_of_one_task_is_mpich() -> None:
    """`flux run -n1 mpiexec ...`: the one task's variables reach every MPI rank."""
    one_task = {**FLUX_TASK_2_OF_3, "FLUX_TASK_RANK": "0", "FLUX_JOB_SIZE": "1",
                "FLUX_JOB_NNODES": "1", "PMI_RANK": "0", "PMI_SIZE": "1"}
    hydra = {k: v for k, v in HYDRA_RANK.items() if k != "PMI_FD"}
    info = detect({**one_task, **hydra})
    assert (info.launcher, info.rank, info.size) == ("mpich", 6, 8)


def test_flux_override_without_its_variables_is_a_clear_error() -> None:
    with pytest.raises(UsageError, match="launcher flux: rank variable FLUX_TASK_RANK is missing"):
        detect({}, "flux")
