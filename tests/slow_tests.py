"""The tests that take over a minute in the whole run on a 2-core machine, and why.

``harness.tiers`` marks them ``slow``: the quick tier (``python3 -m pytest -m "not slow"``)
leaves them out. docs/install.md lists the same (checked by ``tests/test_collection.py``).
Times: a fresh clone's whole run, 4 pytest-xdist workers on 2 cores (setup + call).
"""

from __future__ import annotations

SLOW_SECONDS = 60.0

# A test id without its parameters: why it is slow.
SLOW = {
    "tests/elastic/test_slurm_walltime.py::test_a_computation_outlives_three_walltimes_with_no_key_lost":
        "three jobs of Slurm's shortest walltime, 1 minute, run out one after another (188 s)",
    "tests/build/test_readme_install.py::test_first_command_on_a_stock_python":
        "the README's first command in Debian 12's and Ubuntu 24.04's own Python: a venv and "
        "Dask installed from nothing (96-119 s each)",
    "tests/test_oldest_dask.py::test_dask_facing_tests_pass_on_the_oldest_supported_dask":
        "the Dask-facing tests again, in the oldest supported Dask's venv (92 s)",
    "tests/test_scale.py::test_the_schedulers_cost_per_join_does_not_grow_from_500_to_2000_workers":
        "2,500 simulated TLS workers join a real scheduler (80 s)",
    "tests/test_scale.py::test_aurora_cpu_layout_104_workers_on_each_of_two_nodes":
        "208 real workers on 2 cores (79 s)",
    "tests/test_scale.py::test_the_scale_benchmark_runs_and_prints_its_table":
        "the scale benchmark's every phase at 10 and 30 workers (43-69 s)",
    "tests/test_scale_faults.py::test_the_scale_faults_benchmark_runs_and_prints_its_table":
        "the fault benchmark's every scenario, reduced (57 s)",
    "tests/ansible/test_ansible_static.py::test_wheel_build_is_cached_and_reproducible":
        "the role's wheel built twice from the tree (80 s)",
    "tests/ansible/test_ansible_static.py::test_ansible_lint_production_profile":
        "ansible-lint's production profile over the role (59 s)",
    "tests/ansible/test_ansible_render.py::test_python_provider_puts_hpc_cluster_beside_start_cluster":
        "the role's python provider installs dask-hpc into a venv (75 s)",
    "tests/ansible/test_ansible_render.py::test_deepops_launch_script_runs_a_cluster_over_a_slurm_allocation":
        "the role's launch script runs a cluster in a Slurm allocation (56 s)",
}  # fmt: skip

# Session fixtures that take minutes: every test that uses one is slow (the first to run
# waits for it). (directory under tests/, fixture name): why.
SLOW_FIXTURES = {
    ("ansible", "env"): "the role converged on debootstrap targets, every supported "
    "ansible-core, twice (first converge 339 s, second 154 s)",
    ("build", "local_image"): "the local image built for real: debootstrap, wheels, "
    "apptainer build, signing (454 s)",
}
