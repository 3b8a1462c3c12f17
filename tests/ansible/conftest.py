"""Fixtures for the Ansible role's tests: fresh chroot targets, a wheel, an image, a converge."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from ansible_support import (
    CACHE,
    REPO,
    TIMINGS,
    Env,
    Target,
    live_sysctls,
    require_setup,
    run_base,
    run_playbook,
    sha256,
)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """No request log on stderr."""


def write_inventory(path: Path, targets: Iterable[Target]) -> Path:
    """A YAML-plugin (JSON) inventory with DeepOps' groups holding these targets."""
    groups: dict[str, dict[str, dict[str, object]]] = {"slurm-node": {}, "slurm-master": {}}
    for t in targets:
        groups[t.group][t.name] = {"ansible_host": str(t.root), **t.hostvars}
    children = {g: {"hosts": h} for g, h in groups.items() if h}
    path.write_text(
        json.dumps({"all": {"children": {"slurm-cluster": {"children": children}}}}, indent=1)
    )
    return path


@pytest.fixture(scope="session")
def env() -> Iterator[Env]:
    """Fresh targets from the cached tarballs, a dask-hpc wheel, an image and its URL."""
    require_setup()
    workdir = Path(tempfile.mkdtemp(prefix="dask-hpc-ansible-", dir=run_base()))
    server: http.server.ThreadingHTTPServer | None = None
    try:
        start = time.monotonic()
        targets = {
            "debian12": Target("debian12", "debian12.tar", "cp311", "slurm-node"),
            "ubuntu2204": Target("ubuntu2204", "ubuntu2204.tar", "cp310", "slurm-master"),
        }
        # A copy of Debian 12 that is never converged: --check must work on a fresh node too.
        fresh = Target("debian12-fresh", "debian12.tar", "cp311", "slurm-node")
        procs = []
        for t in [*targets.values(), fresh]:
            t.root = workdir / t.name
            t.root.mkdir()
            procs.append(
                subprocess.Popen(
                    ["tar", "-C", str(t.root), "-xpf", str(CACHE / "rootfs" / t.tarball)]
                )
            )
        # The project's own wheel, built as it is now.
        dist = workdir / "dist"
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
             "--disable-pip-version-check", "-w", str(dist), str(REPO)],
            check=True, timeout=180, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        wheels = sorted(dist.glob("dask_hpc-*.whl"))
        assert len(wheels) == 1, wheels
        # The site image: content does not matter to the role, its checksum does.
        http_dir = workdir / "http"
        http_dir.mkdir()
        image = http_dir / "dask-hpc-test.sif"
        image.write_bytes(os.urandom(1 << 20))
        handler = functools.partial(_QuietHandler, directory=str(http_dir))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        image_url = f"http://127.0.0.1:{server.server_address[1]}/{image.name}"
        for p in procs:
            assert p.wait(timeout=120) == 0, "unpacking a target failed"
        for t in [*targets.values(), fresh]:
            # Dependency wheels where a cluster would keep them: on the shared file system.
            subprocess.run(
                ["cp", "-a", str(CACHE / "wheels" / t.python_tag), str(t.root / "srv/wheelhouse")],
                check=True,
            )
        TIMINGS["targets"] = time.monotonic() - start
        checksum = f"sha256:{sha256(image)}"
        common = {
            "ansible_connection": "community.general.chroot",
            "ansible_become": False,
            "ansible_python_interpreter": "/usr/bin/python3",
            # No distribution package for Apptainer on these two (see ansible/README.md).
            "dask_hpc_apptainer": False,
            "dask_hpc_provider": "python",
            "dask_hpc_python_wheel": str(wheels[0]),
            "dask_hpc_python_find_links": ["/srv/wheelhouse"],
            "dask_hpc_python_offline": True,
            "dask_hpc_image_checksum": checksum,
            "dask_hpc_sysctl_extra": {"net.ipv4.tcp_max_syn_backlog": 8192},
        }
        targets["debian12"].hostvars = {**common, "dask_hpc_image_src": str(image)}
        targets["ubuntu2204"].hostvars = {
            **common,
            "dask_hpc_image_url": image_url,
            "dask_hpc_gpu": "nvidia",  # a chroot shows no PCI devices: force the GPU path
            "dask_hpc_lmod": True,
            "dask_hpc_apptainer_exec_args": ["--bind", "/srv"],
        }
        fresh.hostvars = targets["debian12"].hostvars
        inventory = write_inventory(workdir / "inventory.json", targets.values())
        fresh_inventory = write_inventory(workdir / "inventory-fresh.json", [fresh])
        yield Env(workdir, inventory, targets, wheels[0], image, image_url, fresh, fresh_inventory)
    finally:
        start = time.monotonic()
        if server is not None:
            server.shutdown()
            server.server_close()
        if os.environ.get("DASK_HPC_KEEP_TARGETS") != "1":
            subprocess.run(["rm", "-rf", "--one-file-system", str(workdir)], check=False)
        TIMINGS["cleanup"] = time.monotonic() - start


@pytest.fixture(scope="session")
def converged(env: Env) -> Env:
    """The first converge of both targets (run once per session)."""
    if env.converge is None:
        env.live_sysctl_before = live_sysctls()
        env.converge = run_playbook(env.workdir, env.inventory)
        TIMINGS["converge"] = env.converge.seconds
    run = env.converge
    assert run.returncode == 0, run.describe()
    return env


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how long the real Ansible runs took."""
    if TIMINGS:
        terminalreporter.write_line(
            "ansible timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in TIMINGS.items())
        )
