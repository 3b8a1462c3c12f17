"""The Dask-facing tests a second time, against the newest Dask inside the declared range.

The main run covers the range's low end (the pinned release, constraints.txt); these run in the
virtual environment tests/setup/newest_dask.sh builds (the newest Dask and distributed pip finds
in the range, this checkout editable): the Nanny operations and failures of test_dask_compat
(local mode and MPICH), test_local, MPICH's launches in test_launch and its SIGTERM in
test_faults, the gated scheduler's in-process tests of test_dashboard, and every change of
Dask's behaviour at scale (``dask_hpc.at_scale``: its tests, and test_scale's in-process ones).
dask-cuda's tests stay out: dask-cuda 26.10 pins its own Dask (2026.7.1), which the main run
covers.
DASK_VERSION=X runs them against release X instead (after: DASK_VERSION=X bash
tests/setup/newest_dask.sh).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from dask_range import distributed_range
from packaging.specifiers import SpecifierSet
from support import REPO

CACHE = Path(os.environ.get("DASK_HPC_TEST_CACHE", "/var/tmp/dask-hpc-tests"))
FILES = [
    "tests/test_dask_compat.py",
    "tests/test_local.py",
    "tests/test_launch.py",
    # The Nanny's queues (WorkerProcess.init_result_q, child_stop_q): their semaphores' names
    # removed once the worker connected (running/semaphore_names.py)
    "tests/test_faults.py::test_sigterm_to_launcher_shuts_down_gracefully[mpich]",
    # The gated scheduler: Dask's routes less the proxy, Dask's dashboard connected on the first
    # request (the live one needs the suite's browser, which this venv has not)
    "tests/test_dashboard.py::test_the_scheduler_serves_dasks_routes_but_the_worker_proxy",
    "tests/test_dashboard.py::test_the_dashboard_is_connected_by_the_first_request_with_the_token",
    # Dask changed at scale (dask_hpc.at_scale): each of our versions of Dask's methods
    "tests/test_many_workers.py",
    "tests/test_heartbeats.py",
    "tests/test_event_loop.py",
    "tests/test_log_summary.py",
    "tests/test_lighter_tls.py",
    "tests/test_stealing.py",
    "tests/test_sends.py",
    "tests/test_many_dependencies.py",
    "tests/test_removals.py",
    "tests/test_closing.py",
    *(
        f"tests/test_scale.py::{name}"  # its in-process ones; the others start 2,000 workers
        for name in (
            "test_a_cluster_shutdown_does_not_tell_each_leaving_worker_about_every_other",
            "test_a_heartbeat_cut_short_by_its_workers_close_is_not_an_error",
            "test_a_running_workers_failed_heartbeat_is_still_reported",
            "test_a_cluster_shutdown_does_not_warn_of_handshakes_that_closing_workers_break_off",
        )
    ),
]
SELECT = "not cuda and not srun and not sbatch and not openmpi and not emulated"

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(900)]


def test_dask_facing_tests_pass_on_the_newest_dask_in_range(run_cmd, tagged_env) -> None:
    venv = CACHE / "dask-newest-venv"
    python = venv / "bin" / "python"
    assert python.is_file(), f"{venv} missing: run tests/setup/newest_dask.sh"
    env = {**tagged_env, "PATH": f"{venv / 'bin'}{os.pathsep}{tagged_env['PATH']}"}
    # Under the suite's CPU log (harness.cpu_account), the inner run stays in this test's
    # cgroup and is counted once, as this test: it writes no log lines of its own.
    env.pop("DASK_HPC_TEST_CPU_LOG", None)
    versions = run_cmd(
        [
            str(python),
            "-c",
            "import json, dask, distributed, dask_hpc; "
            "print(json.dumps([dask.__version__, distributed.__version__, dask_hpc.__file__]))",
        ],
        env=env,
    ).check()
    dask_version, distributed_version, package = json.loads(versions.stdout)
    assert dask_version == distributed_version, (dask_version, distributed_version)
    wanted = os.environ.get("DASK_VERSION")
    if wanted:
        assert distributed_version == wanted
    else:
        assert distributed_version in SpecifierSet(distributed_range()), distributed_version
    assert Path(package).is_relative_to(REPO / "src"), package  # this checkout's dask-hpc
    result = run_cmd(
        [str(python), "-m", "pytest", *FILES, "-k", SELECT, "-q", "-ra", "-p", "no:cacheprovider"],
        env=env,
        cwd=REPO,
        timeout=840,
    )
    output = result.stdout + result.stderr
    # The inner failures themselves, not the tail (its durations list pushed them out once)
    failures = output.split("= FAILURES =", 1)[-1].split(" slowest ", 1)[0]
    assert result.returncode == 0, failures[:8000] + output[-1500:]
    summary = output.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 15, summary
    assert not re.search(r"skipped|xfail|error", summary), summary
