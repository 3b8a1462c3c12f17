"""How the quick tier is cut: the tests that take over a minute in the whole run on a 2-core
machine, and why; those that took most CPU (tests/heavy_tests.json); and the tests run under
every launcher or batch system.

``harness.tiers`` marks the first ``slow`` and, of each of the second, every case but the first
``matrix``: the quick tier (``python3 -m pytest -m "not slow and not matrix"``) leaves them out.
docs/install.md lists the same (checked by ``tests/test_collection.py``).
Times: a fresh clone's whole run, 4 pytest-xdist workers on 2 cores (setup + call).
"""

from __future__ import annotations

import json
from pathlib import Path

SLOW_SECONDS = 60.0
# The tests that took over its threshold of CPU seconds in a whole run: the quick tier leaves
# them out too (with 2 cores, a test's CPU is what the run pays for it; its wall time is mostly
# its wait for the CPU). Written by ``python3 tests/harness/cpu_account.py LOG --heavy ...``.
HEAVY_FILE = Path(__file__).with_name("heavy_tests.json")
HEAVY: dict[str, float] = json.loads(HEAVY_FILE.read_text())["tests"]

# A test id without its parameters: why it is slow.
SLOW = {
    "tests/elastic/test_slurm_walltime.py::test_a_computation_outlives_three_walltimes_with_no_key_lost":
        "three jobs of Slurm's shortest walltime, 1 minute, run out one after another (188 s)",
    "tests/elastic/test_flux_elastic.py::test_a_computation_outlives_two_walltimes_with_no_key_lost":
        "90-second jobs on a real Flux replaced under 2 minutes of computing (~150 s)",
    "tests/build/test_readme_install.py::test_first_command_on_a_stock_python":
        "the README's first command in Debian 12's and Ubuntu 24.04's own Python: a venv and "
        "Dask installed from nothing (96-119 s each)",
    "tests/test_newest_dask.py::test_dask_facing_tests_pass_on_the_newest_dask_in_range":
        "the Dask-facing tests again, in the newest Dask in range's venv (92 s)",
    "tests/test_scale.py::test_the_schedulers_cost_per_join_does_not_grow_from_500_to_2000_workers":
        "2,500 simulated TLS workers join a real scheduler (80 s)",
    "tests/test_scale.py::test_aurora_cpu_layout_104_workers_on_each_of_two_nodes":
        "208 real workers on 2 cores (79 s)",
    "tests/test_scale.py::test_the_scale_benchmark_runs_and_prints_its_table":
        "the scale benchmark's every phase at 10 and 30 workers (43-69 s)",
    "tests/test_scale_faults.py::test_the_scale_faults_benchmark_runs_and_prints_its_table":
        "the fault benchmark's every scenario, reduced (57 s; ~90 s with the hang, which "
        "waits hpc.hung-timeout)",
    "tests/ansible/test_ansible_static.py::test_wheel_build_is_cached_and_reproducible":
        "the role's wheel built twice from the tree (80 s)",
    "tests/ansible/test_ansible_static.py::test_ansible_lint_production_profile":
        "ansible-lint's production profile over the role (59 s)",
    "tests/ansible/test_ansible_pyxis.py::test_squashfs_placed_verified_and_a_bad_one_refused":
        "the role's squashfs tasks run four times: placed, verified in place, two refused (65 s)",
    "tests/ansible/test_ansible_render.py::test_python_provider_puts_hpc_cluster_beside_start_cluster":
        "the role's python provider installs dask-hpc into a venv (75 s)",
    "tests/ansible/test_ansible_render.py::test_deepops_launch_script_runs_a_cluster_over_a_slurm_allocation":
        "the role's launch script runs a cluster in a Slurm allocation (56 s)",
}  # fmt: skip

# Session fixtures that take minutes: every test that uses one is slow (the first to run
# waits for it). (directory under tests/, fixture name): why.
SLOW_FIXTURES = {
    ("ansible", "env"): "the role converged on minbase root filesystem targets, every supported "
    "ansible-core, twice (first converge 337 s, second 168 s; 659 s of CPU)",
    ("build", "local_image"): "the local image built for real: debootstrap, wheels, "
    "apptainer build, signing (512 s beside the rest; 86 s alone)",
    ("build", "installed"): "dask-hpc pip-installed, not editable, into a venv of its own "
    "(its tests 68-90 s with it)",
}

# Files whose tests mostly wait, by design, on a timeout (a hung rank's hpc.hung-timeout, a
# lost node's heartbeats): one pytest-xdist group, so that they wait in one worker while the
# others compute. Ungrouped, their cases ran in all four workers at once, and the 2 cores
# idled (5-second /proc/stat samples of three whole runs, 2026-11-30: 13-64% idle in the minute
# test_hung.py ran, the run's largest idle stretch). file: its CPU against its wall time then.
WAITING = {
    "tests/test_hung.py": "93 CPU s in 358 s (0.26)",
    "tests/test_node_loss.py": "59 CPU s in 211 s (0.28)",
}
WAITING_GROUP = "waiting on timeouts"

# Tests parametrized over launchers (or batch systems): the same behaviour under each. The quick
# tier runs the first case of each (collection order); the whole run, all of them. The quick
# tier's time: docs/install.md (2026-11-30: 973 tests, 261 s on 2 cores).
LAUNCHER_MATRIX = (
    "tests/test_dask_compat.py::test_a_worker_killed_by_its_tasks_comes_back_every_time",
    "tests/test_dask_compat.py::test_nanny_operations_work_and_the_job_ends_cleanly",
    "tests/test_dask_compat.py::test_a_worker_restarting_when_the_cluster_ends_is_stopped_at_once",
    "tests/test_plain_batch_emulated.py::test_plain_script_runs_under_the_sites_mpi_emulated",
    "tests/test_node_loss.py::test_a_lost_rank_does_not_end_the_job",
    "tests/test_hung.py::test_a_hung_rank_is_given_up_and_the_job_goes_on",
    "tests/test_faults.py::test_a_rank_that_never_starts_is_named_after_the_timeout",
    "tests/test_faults.py::test_stale_scheduler_file_and_certificates_are_never_used",
    "tests/test_node_loss.py::test_rank_0_lost_still_ends_everything_under_the_options_that_keep_ranks",
    "tests/test_faults.py::test_command_crash_stops_the_cluster_with_its_status",
    "tests/test_faults.py::test_scheduler_rank_killed_every_rank_exits_nonzero",
    "tests/test_faults.py::test_worker_killed_with_sigkill_is_restarted_and_command_completes",
    "tests/test_faults.py::test_sigterm_to_launcher_shuts_down_gracefully",
    "tests/test_faults.py::test_scheduler_process_killed_is_an_error_not_a_clean_shutdown",
    "tests/test_faults.py::test_two_clusters_at_once_in_one_directory_are_isolated",
    "tests/test_docs.py::test_readme_quick_start_runs",
    "tests/elastic/test_emulated_pbs_lsf.py::test_scale_up_and_down_on_emulated",
    "tests/neighbour/test_planted_directories.py::test_planted_working_directories_are_never_used",
    "tests/neighbour/test_secrets.py::test_a_job_log_holds_no_token",
    "tests/test_forked_mp.py::test_a_ranks_processes_are_all_forks_of_it_and_leave_no_temp_dir",
    "tests/neighbour/test_scheduler_file.py::test_join_reads_only_the_owners_scheduler_file",
    "tests/neighbour/test_planted_directories.py::test_a_stale_cluster_directory_of_another_user_is_refused",
    "tests/test_launch.py::test_sbatch_with_mpiexec_inside",
    "tests/test_harness.py::test_sbatch_mpiexec_leaks_slurm_procid",
    "tests/test_binding.py::test_a_chosen_binding_with_too_few_cpus_is_refused_in_one_line",
    "tests/neighbour/test_import_path.py::test_the_console_script_under_each_launcher",
)
