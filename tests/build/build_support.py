"""Helpers shared by the container tests (importable as ``build_support``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE_BUILD_TIMEOUT = 900


def invoke_argv(*args: str) -> list[str]:
    """``python -m invoke ARGS`` run from the repository root."""
    return [sys.executable, "-m", "invoke", *args]


def require_apptainer() -> str:
    """The apptainer command; fails loudly when tests/setup/apptainer.sh has not run."""
    path = shutil.which("apptainer")
    assert path, "apptainer is not on PATH: run tests/setup/apptainer.sh"
    return path


def require_sidroot() -> str:
    """The command that enters Apptainer's root filesystem (made by tests/setup/apptainer.sh)."""
    path = shutil.which("sidroot")
    assert path, "sidroot is not on PATH: run tests/setup/apptainer.sh"
    return path
