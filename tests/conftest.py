"""Shared fixtures: the harness plugin (tagged processes, leak checks, Slurm) and start-cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["harness.plugin", "harness.cpu_account", "harness.tiers"]


@pytest.fixture
def cluster_env(tagged_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A tagged environment whose job-scoped scheduler directories live under ``tmp_path``."""
    env = dict(tagged_env)
    env["DASK_HPC__SCHEDULER_DIRECTORY"] = str(tmp_path / "shared")
    env["DASK_HPC__TIMEOUT"] = "60"
    env["PYTHONUNBUFFERED"] = "1"
    # No GPU here: dask-cuda's own switch for device-less tests (no NVML, no device memory).
    env["DASK_CUDA_TEST_DISABLE_DEVICE_SPECIFIC"] = "1"
    # Neither a launcher's nor an ssh session's (which decides whether the tunnel is printed).
    drop = ("SLURM_", "OMPI_COMM", "PMI_", "PALS_", "JSM_", "FLUX_", "SSH_")
    for var in [v for v in env if v.startswith(drop)]:
        del env[var]
    return env
