"""Shared fixtures: the harness plugin (tagged processes, leak checks, Slurm) and start-cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["harness.plugin"]


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
    drop = ("SLURM_", "OMPI_COMM", "PMI_", "PALS_", "JSM_", "SSH_")
    for var in [v for v in env if v.startswith(drop)]:
        del env[var]
    return env


# Session fixtures too costly to make once per pytest-xdist worker (the converged Ansible
# targets, the built image): the tests that use them run in one worker, together.
SHARED_SESSION = {("ansible", "env"): "ansible targets", ("build", "local_image"): "local image"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep together, under ``-n N --dist loadgroup``, the tests that share a costly fixture:
    a module-scoped one (one worker per file) or one of ``SHARED_SESSION``. The rest spread."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        group = None
        for name, defs in item._fixtureinfo.name2fixturedefs.items():
            fixture = defs[-1]
            where = Path(fixture.baseid.split("::")[0]).parts[1:2]  # tests/<dir>/...
            if fixture.scope == "session" and (*where, name) in SHARED_SESSION:
                group = SHARED_SESSION[(*where, name)]
                break
            if fixture.scope in ("module", "package", "class"):
                group = item.nodeid.split("::")[0]
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
