"""Helpers shared by the container tests (importable as ``build_support``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE_BUILD_TIMEOUT = 1200


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


@dataclass(frozen=True)
class ImageKeys:
    """A site's key pair for signing images (PEM, made with openssl): private 0600, public."""

    private: Path
    public: Path


def make_image_keys(directory: Path, name: str = "site") -> ImageKeys:
    """An Ed25519 key pair, as a site makes one (``apptainer sign --key`` takes PEM keys)."""
    private, public = directory / f"{name}.key.pem", directory / f"{name}.pub.pem"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)],
        check=True, capture_output=True,
    )  # fmt: skip
    private.chmod(0o600)
    subprocess.run(
        ["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
        check=True, capture_output=True,
    )  # fmt: skip
    return ImageKeys(private, public)
