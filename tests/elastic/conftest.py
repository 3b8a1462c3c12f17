"""Fixtures of the elastic-cluster tests: a Slurm of their own (and a Flux), and HPCClusters that
always close.

The HPCCluster runs in the test's process (as in a notebook); its jobs go to a real Slurm with
three emulated nodes of 32 CPUs, 512 GiB and 2 GPUs (GRES, EMULATED devices: a job that asks for
them gets ``CUDA_VISIBLE_DEVICES`` from Slurm, as on DeepOps), a ``short`` partition (MaxTime 1
minute) whose limit a longer walltime breaks, and the partitions dask-jobqueue's documented
``SLURMCluster`` calls name (``normal``, ``regular``, ``savio2_bigmem``). The plugin checks
that Slurm for jobs left after every test, as it checks the session's, and the jobs' processes
carry the test's tag (sbatch exports it).

The Flux tests get a REAL Flux instance of three brokers (``flux start --test-size=3``) and this
process as a shell inside it (FLUX_URI set: Flux is detected); its jobs are checked after every
test as the Slurm's are, and carry the tag (flux batch passes the environment on).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import dask.config
import pytest
from harness.flux import FluxInstance
from harness.plugin import (
    unwatch_flux_jobs,
    unwatch_slurm_jobs,
    watch_flux_jobs,
    watch_slurm_jobs,
)
from harness.slurm import SlurmCluster

from dask_hpc import HPCCluster

NODES, CPUS, GPUS, MEMORY_MB = 3, 32, 2, 512 * 1024
PARTITIONS = {"short": "MaxTime=1", "normal": "", "regular": "", "savio2_bigmem": ""}


@pytest.fixture(scope="session")
def elastic_slurm() -> Iterator[SlurmCluster]:
    base = Path(tempfile.mkdtemp(prefix="dask-hpc-elastic-slurm-"))
    cluster = SlurmCluster(
        base, nodes=NODES, cpus=CPUS, gpus=GPUS, memory_mb=MEMORY_MB, partitions=PARTITIONS
    )
    cluster.start()
    watch_slurm_jobs(cluster)
    try:
        yield cluster
    finally:
        unwatch_slurm_jobs(cluster)
        cluster.stop_and_remove()


@pytest.fixture
def elastic_env(
    monkeypatch: pytest.MonkeyPatch, elastic_slurm: SlurmCluster, tmp_path: Path
) -> Iterator[Path]:
    """This process as a login node of the test Slurm; returns the shared directory.

    The jobs inherit this environment (sbatch exports it): the worktree's PYTHONPATH, the
    test's tag, no GPU-specific dask-cuda code.
    """
    yield from _login(monkeypatch, tmp_path, {"SLURM_CONF": elastic_slurm.env["SLURM_CONF"]})


@pytest.fixture
def make_cluster(elastic_env: Path) -> Iterator[Callable[..., HPCCluster]]:
    """``make_cluster(*args, **kwargs)``: an HPCCluster that is closed after the test."""
    yield from _clusters()


@pytest.fixture(scope="session")
def elastic_flux() -> Iterator[FluxInstance]:
    instance = FluxInstance(size=3).start()
    watch_flux_jobs(instance)
    try:
        yield instance
    finally:
        unwatch_flux_jobs(instance)
        instance.stop()


@pytest.fixture
def flux_login(
    monkeypatch: pytest.MonkeyPatch, elastic_flux: FluxInstance, tmp_path: Path
) -> Iterator[Path]:
    """This process as a shell in the test Flux instance; returns the shared directory."""
    yield from _login(monkeypatch, tmp_path, elastic_flux.env)


@pytest.fixture
def make_flux_cluster(flux_login: Path) -> Iterator[Callable[..., HPCCluster]]:
    """``make_flux_cluster(*args, **kwargs)``: an HPCCluster on the test Flux, closed after."""
    yield from _clusters()


def _login(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, batch_env: Mapping[str, str]
) -> Iterator[Path]:
    """This process as a login node: no launcher's variables but ``batch_env`` (the batch
    system's), the settings every elastic test uses; yields the shared directory."""
    shared = tmp_path / "shared"
    launchers = ("SLURM_", "OMPI_COMM", "PMI_", "PALS_", "FLUX_")
    for var in [v for v in os.environ if v.startswith(launchers)]:
        monkeypatch.delenv(var)
    for var, value in batch_env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    monkeypatch.setenv("DASK_CUDA_TEST_DISABLE_DEVICE_SPECIFIC", "1")
    monkeypatch.setenv("DASK_HPC__TIMEOUT", "60")
    # hpc.cluster.poll-interval is the product's 2 s: at 0.5 s, reading the jobs' states
    # (`flux jobs`: ~0.1 s of CPU each) was ~25 of the 61 CPU s of a 2-minute Flux test.
    settings = {"hpc.scheduler-directory": str(shared)}
    with dask.config.set(settings):
        yield shared


def _clusters() -> Iterator[Callable[..., HPCCluster]]:
    made: list[HPCCluster] = []

    def make(*args: Any, **kwargs: Any) -> HPCCluster:
        kwargs.setdefault("quiet", True)
        cluster = HPCCluster(*args, **kwargs)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()



@pytest.fixture
def emulator_env(
    tagged_env: dict[str, str], elastic_slurm: SlurmCluster, tmp_path: Path
) -> dict[str, str]:
    """A login node's environment with the EMULATED PBS Pro and LSF commands on PATH."""
    from harness.batch_emulation import BIN

    env = {k: v for k, v in tagged_env.items() if not k.startswith("SLURM_")}
    env.update(elastic_slurm.env)
    env["PATH"] = f"{BIN / 'pbs'}:{BIN / 'lsf'}:{env['PATH']}"
    env["DASK_HPC_EMU_SPOOL"] = str(tmp_path / "emu")
    return env


@pytest.fixture
def shell_env(tagged_env: dict[str, str], elastic_slurm: SlurmCluster, tmp_path: Path) -> dict:
    """The environment of a shell on a login node of the test Slurm (hpc-cluster's tests)."""
    env = {k: v for k, v in tagged_env.items() if not k.startswith("SLURM_")}
    env.update(elastic_slurm.env)
    env["DASK_HPC__SCHEDULER_DIRECTORY"] = str(tmp_path / "shared")
    env["DASK_HPC__CLUSTER__POLL_INTERVAL"] = "0.5"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def flux_shell_env(tagged_env: dict[str, str], elastic_flux: FluxInstance, tmp_path: Path) -> dict:
    """The environment of a shell in the test Flux instance (hpc-cluster's tests)."""
    env = {k: v for k, v in tagged_env.items() if not k.startswith(("SLURM_", "FLUX_"))}
    env.update(elastic_flux.env)
    env["DASK_HPC__SCHEDULER_DIRECTORY"] = str(tmp_path / "shared")
    env["DASK_HPC__CLUSTER__POLL_INTERVAL"] = "0.5"
    env["PYTHONUNBUFFERED"] = "1"
    return env
