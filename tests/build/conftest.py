"""Fixtures for the container tests: invoke as a subprocess, and the real local image."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from build_support import (  # noqa: F401
    IMAGE_BUILD_TIMEOUT,
    REPO,
    ImageKeys,
    invoke_argv,
    make_image_keys,
    require_apptainer,
    require_sidroot,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Whichever test needs the image first also waits for its build: its timeout is its own
    plus IMAGE_BUILD_TIMEOUT (86 s alone, 512 s beside the rest of the suite in CI, where a
    600 s timeout once cut it off)."""
    for item in items:
        if "local_image" in getattr(item, "fixturenames", ()):
            own = item.get_closest_marker("timeout")
            seconds = float(own.args[0] if own and own.args else config.getini("timeout") or 0)
            item.add_marker(pytest.mark.timeout(IMAGE_BUILD_TIMEOUT + seconds), append=False)


@pytest.fixture
def invoke(run_cmd: Callable[..., object]) -> Callable[..., object]:
    """``invoke(*args, timeout=60, env=None)``: run an invoke task from the repository root."""

    def _run(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> object:
        return run_cmd(invoke_argv(*args), timeout=timeout, env=env, cwd=REPO)

    return _run


@pytest.fixture(scope="session")
def image_keys(tmp_path_factory: pytest.TempPathFactory) -> ImageKeys:
    """The site's key pair the session's image is signed with."""
    return make_image_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def local_image(tmp_path_factory: pytest.TempPathFactory, image_keys: ImageKeys) -> Path:
    """The image `invoke build --site local` makes, built once per session (for real), signed
    with the session's site key; its sha256 recorded beside it. DASK_HPC_TEST_LOCAL_IMAGE names
    one built before (unsigned: tests that verify a signature fail with it)."""
    require_apptainer()
    prebuilt = os.environ.get("DASK_HPC_TEST_LOCAL_IMAGE")
    if prebuilt:  # a developer's image of this tree, built once (invoke build --site local)
        path = Path(prebuilt)
        assert (path.parent / f"{path.name}.sha256").is_file(), f"{prebuilt}: no .sha256 beside it"
        return path
    out = tmp_path_factory.mktemp("image") / "dask-hpc-local.sif"
    result = subprocess.run(
        invoke_argv(
            "build", "--site", "local", "--output", str(out), "--sign-key", str(image_keys.private)
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=IMAGE_BUILD_TIMEOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode == 0, (
        f"invoke build --site local failed ({result.returncode})\n"
        f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"
    )
    assert out.is_file()
    return out
