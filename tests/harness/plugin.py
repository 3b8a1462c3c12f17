"""pytest plugin: tagged environments, hard-timeout commands, a session Slurm cluster and Flux
instance, leak checks.

Load with ``pytest_plugins = ["harness.plugin"]`` in tests/conftest.py.

Every test runs with ``DASK_HPC_TEST_TAG=<uuid>`` in ``os.environ`` (so every process it starts
inherits it, through srun/sbatch/mpiexec too).  After the test the plugin waits up to
``DASK_HPC_LEAK_TIMEOUT`` (LEAK_TIMEOUT) for all processes carrying the tag to exit; leftovers are
killed and the test FAILS naming them.  Slurm jobs still listed by the session cluster after a
test, and Flux jobs still active in a watched Flux instance, are cancelled and fail the test
too.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from dask_hpc.running.rank import SIGNAL_BUDGET

from .flux import FluxInstance
from .procs import (
    TAG_VAR,
    TEST_TMP_VAR,
    CmdResult,
    LeakError,
    check_no_leaks,
    new_tag,
    run_cmd,
    tagged,
)
from .slurm import SlurmCluster
from .waiting import wait_for as _wait_for

# A rank may take the product's SIGNAL_BUDGET (20 s) to stop after SIGTERM, and a test's end may
# be what sent it: Slurm lists a job until its processes are gone, but this host's Flux (no
# cgroups) lists a cancelled batch job as ended while its tasks still run (measured, flux-core
# 0.88: CANCELED 5.2 s after `flux cancel`, its task that takes 20 s after SIGTERM gone at
# 22.1 s). With 15 s, a Flux job cancelled as its cluster closed failed a CI run: its rank, still
# starting, was within its budget. What outlives the budget (and the SIGKILL after it) is a leak.
LEAK_TIMEOUT = float(os.environ.get("DASK_HPC_LEAK_TIMEOUT", SIGNAL_BUDGET + 10))

_SESSION_CLUSTER: list[SlurmCluster] = []
_FLUX: list[FluxInstance] = []


def pytest_configure(config: pytest.Config) -> None:
    """Put this Python's scripts directory first on PATH, for every process the tests start.

    On a site, ``python3`` and ``start-cluster`` come from the environment's bin directory. Run
    as ``.venv-tests/bin/python -m pytest`` without the venv's activation, or in a pyenv Python
    (CI's), they would come from elsewhere on PATH: another Python, or pyenv's shims, bash
    scripts that each run ``pyenv exec`` and its helpers first (measured 2026-11-30: five
    ``python3 -c pass`` took 0.72 s through the shim, 0.25 s direct), and the suite starts
    thousands of Python processes.
    """
    scripts = sysconfig.get_path("scripts")
    path = os.environ.get("PATH", "").split(os.pathsep)
    if path[0] != scripts:
        os.environ["PATH"] = os.pathsep.join([scripts, *path])


@pytest.fixture(autouse=True)
def test_tag(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This test's unique tag, also exported in ``os.environ``; leaks are asserted after.

    Each test also gets its own ``TMPDIR`` (as a batch job gets its own), removed after it.
    Open MPI 4.1 keeps every ``mpirun`` of a user on a host in one ``ompi.<host>.<uid>``
    directory there, and one that ends removes it while another is still making its own inside
    it ("orte_session_dir failed": open-mpi/ompi#8510): it failed a CI run when two xdist
    workers' tests ran mpirun at the same moment, and 1 run in 10 of tests/test_harness.py's
    made-up-host tests on two workers. (Not ``orte_tmpdir_base``: mpirun hands that to the
    daemons it starts on their command line, over ``fake-rsh``'s directory for each host.)
    """
    tag = new_tag()
    # "_" before the random part: Dask reads DASK_HPC_TEST_TMPDIR as Python, and "-1in..." made
    # every `import dask` in the test print a SyntaxWarning (a CI run; tests/test_dask_env.py)
    tmpdir = tempfile.mkdtemp(prefix="dask-hpc-test_")
    os.chmod(tmpdir, 0o1777)  # as /tmp: a test's second user may use it too
    monkeypatch.setenv(TAG_VAR, tag)
    monkeypatch.setenv("TMPDIR", tmpdir)
    monkeypatch.setenv(TEST_TMP_VAR, tmpdir)
    # and the Dask workers the in-process tests start: Python read TMPDIR once, before, so their
    # scratch space was /tmp/dask-scratch-space (left after a whole run, 2026-12-01). (Not
    # tempfile.tempdir: a session fixture first made in this test would make its directory here.)
    import dask.config

    monkeypatch.setitem(dask.config.config, "temporary-directory", tmpdir)
    yield tag
    monkeypatch.delenv(TAG_VAR, raising=False)
    problems = []
    try:
        check_no_leaks(tag, timeout=LEAK_TIMEOUT)
    except LeakError as e:
        problems.append(str(e))
    for cluster in _SESSION_CLUSTER:
        if cluster.started:
            left = _jobs_still_running(cluster)
            if left:
                cluster.cancel_all()
                problems.append(f"Slurm jobs left (cancelled now): {left}")
    for instance in _FLUX:
        active = instance.active_jobs()
        if active:
            instance.cancel_all()
            problems.append(f"Flux jobs left (cancelled now): {active}")
    shutil.rmtree(tmpdir, ignore_errors=True)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def _jobs_still_running(cluster: SlurmCluster) -> list[tuple[str, str, str]]:
    """Jobs left after a test; a job still COMPLETING (its step tearing down after srun
    returned) is given the cluster's KillWait to finish before it counts."""
    try:
        _wait_for(lambda: all(state != "COMPLETING" for _, state, _ in cluster.jobs()),
                  cluster.kill_wait + 10, what="COMPLETING jobs to finish")
    except Exception:  # noqa: BLE001 - reported below as jobs left
        pass
    return cluster.jobs()


def watch_slurm_jobs(cluster: SlurmCluster) -> None:
    """Check another Slurm cluster (a test directory's own) for jobs left after each test."""
    _SESSION_CLUSTER.append(cluster)


def unwatch_slurm_jobs(cluster: SlurmCluster) -> None:
    if cluster in _SESSION_CLUSTER:
        _SESSION_CLUSTER.remove(cluster)


def watch_flux_jobs(instance: FluxInstance) -> None:
    """Check a Flux instance for jobs left active after each test."""
    _FLUX.append(instance)


def unwatch_flux_jobs(instance: FluxInstance) -> None:
    if instance in _FLUX:
        _FLUX.remove(instance)


@pytest.fixture
def tagged_env(test_tag: str) -> dict[str, str]:
    """``os.environ`` + the test tag + loopback MPI settings (Open MPI as root, oversubscribe)."""
    return tagged(os.environ, test_tag)


@pytest.fixture(name="run_cmd")
def run_cmd_(tagged_env: dict[str, str]) -> Callable[..., CmdResult]:
    """``run_cmd(argv, timeout=60, env=None, cwd=None, input=None) -> CmdResult``.

    ``env`` defaults to ``tagged_env``; a given ``env`` gets the tag added.  On timeout the
    process group gets SIGTERM, then SIGKILL; ``result.timed_out`` is set.
    """

    def _run(
        argv: Sequence[str],
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        input: str | None = None,
    ) -> CmdResult:
        full = dict(tagged_env if env is None else env)
        full[TAG_VAR] = tagged_env[TAG_VAR]
        return run_cmd(argv, timeout=timeout, env=full, cwd=cwd, input=input)

    return _run


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One Slurm cluster for the session: 2 emulated nodes (node1, node2) x 8 CPUs.

    Its daemons do not carry test tags; they are stopped at session end and verified gone.
    Use ``slurm_cluster.env`` (SLURM_CONF) on top of ``tagged_env``, or its ``srun``/``sbatch``.
    """
    base = Path(tempfile.mkdtemp(prefix="dask-hpc-slurm-"))
    cluster = SlurmCluster(base, nodes=2, cpus=8)
    cluster.start()
    _SESSION_CLUSTER.append(cluster)
    try:
        yield cluster
    finally:
        _SESSION_CLUSTER.remove(cluster)
        cluster.stop_and_remove()


@pytest.fixture
def slurm_env(tagged_env: dict[str, str], slurm_cluster: SlurmCluster) -> dict[str, str]:
    """``tagged_env`` plus ``SLURM_CONF`` of the session cluster."""
    return {**tagged_env, **slurm_cluster.env}


@pytest.fixture(scope="session")
def flux_instance() -> Iterator[FluxInstance]:
    """One REAL Flux instance for the session: 3 brokers on this host as 3 nodes
    (``flux start --test-size=3``). Its brokers carry no test tag; they are stopped at session
    end and verified gone. Use ``flux_instance.env`` (FLUX_URI, PATH) on top of
    ``tagged_env``."""
    instance = FluxInstance(size=3).start()
    _FLUX.append(instance)
    try:
        yield instance
    finally:
        unwatch_flux_jobs(instance)
        instance.stop()  # raises if a process of it survives


@pytest.fixture
def flux_env(tagged_env: dict[str, str], flux_instance: FluxInstance) -> dict[str, str]:
    """``tagged_env`` plus the session Flux instance's FLUX_URI and ``flux`` on PATH."""
    return {**tagged_env, **flux_instance.env}


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """``wait_for(predicate, timeout, interval=0.05, what=...)``: jittered polling, raises."""
    return _wait_for
