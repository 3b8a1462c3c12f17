"""Fixtures for the Ansible role's tests: fresh chroot targets, the playbook runs against them.

Targets (each a fresh copy of a cached minbase root filesystem tarball, tests/setup/ansible.sh):
- ubuntu2204, ubuntu2404: converged with no variables at all, each in its own inventory, as an
  admin runs `ansible-playbook -i inventory ansible/site.yml`; ubuntu2204's apt lists are
  emptied and stamped fresh first (the role must refresh them anyway). Debian 12 with no
  variables is the DeepOps node below (ansible-core 2.17); under the newest ansible-core it is
  the configured and the pyxis node (a Debian 12 target of its own with no variables repeated
  the DeepOps node's converge: ~90 s of the suite's CPU, 2026-11-30);
- configured: Debian 12 with most settings (a user list, an offline wheelhouse, Apptainer from a
  release package fetched by the controller over HTTP, an Lmod module, a forced NVIDIA GPU);
- fresh: Debian 12, never converged: --check runs and refused runs, which must change nothing;
- master and node: a stock DeepOps layout, converged together with no variables under ansible-core
  2.17 (DeepOps' pin) and DeepOps' ansible.cfg: master exports /sw (/etc/exports, as DeepOps'
  nfs-server role leaves it) and the node mounts it, over sshfs (two_nodes.SshfsShare: no
  NFS in this kernel); master has one system group more (its gids differ from the node's);
- noindex: Debian 12 whose pip names a package index nothing answers on;
- pyxis: Debian 12 made to look like DeepOps today (pyxis_support.emulate_deepops_pyxis: Pyxis's
  plugstack.conf.d/pyxis.conf and an enroot stand-in, as detection input only), the image
  provider with a signed squashfs: first converged under ansible-core 2.17 and DeepOps'
  ansible.cfg, converged again under the newest.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ansible_support import (
    CACHE,
    TIMINGS,
    PlaybookRun,
    Target,
    require_setup,
    run_playbook,
    write_inventory,
)
from node_support import live_sysctls, make_fake_apptainer_deb, prepare_node, run_base, sha256
from pyxis_support import emulate_deepops_pyxis
from two_nodes import SshfsShare

NO_VARS = ("ubuntu2204", "ubuntu2404")
DEEPOPS = ("master", "node")  # converged together: ansible-core 2.17, DeepOps' ansible.cfg
DEEPOPS_RUN = {"core": "2.17", "config": "deepops"}
# What nothing answers on: the discard port of loopback.
UNREACHABLE_INDEX = "http://127.0.0.1:9/simple"
# --check --diff after the converge: the configured node (with a package URL), the one whose
# settings reach the most tasks. (Each run costs a converge's CPU, ~20 s on this 2-core machine:
# the no-variable nodes' check-mode paths are a subset of the configured node's and of the
# fresh node's, and each has a real second converge.)
CHECKED = ("configured",)
BAD_CHECKSUM = "sha256:" + "0" * 64


@dataclass
class Env:
    """Everything one test session converges: targets, inventories, artefacts."""

    workdir: Path
    targets: dict[str, Target]
    inventories: dict[str, Path]
    package: Path
    package_url: str
    image: Path
    share: SshfsShare
    live_sysctl_before: dict[str, str] = field(default_factory=dict)

    def package_vars(self) -> str:
        """-e JSON: Apptainer from the (stand-in) release package, fetched by the controller."""
        return json.dumps(
            {
                "dask_hpc_apptainer": True,
                "dask_hpc_apptainer_package_url": self.package_url,
                "dask_hpc_apptainer_package_checksum": f"sha256:{sha256(self.package)}",
            }
        )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """No request log on stderr."""


@pytest.fixture(scope="session")
def env() -> Iterator[Env]:
    """Fresh targets from the cached tarballs, their inventories, a package served over HTTP."""
    require_setup()
    workdir = Path(tempfile.mkdtemp(prefix="dask-hpc-ansible-", dir=run_base()))
    server: http.server.ThreadingHTTPServer | None = None
    share: SshfsShare | None = None
    try:
        start = time.monotonic()
        targets = {
            "ubuntu2204": Target("ubuntu2204", "ubuntu2204.tar", "slurm-master"),
            "ubuntu2404": Target("ubuntu2404", "ubuntu2404.tar", "slurm-node"),
            "configured": Target("configured", "debian12.tar", "slurm-node"),
            "fresh": Target("fresh", "debian12.tar", "slurm-node"),
            "master": Target("master", "debian12.tar", "slurm-master"),
            "node": Target("node", "debian12.tar", "slurm-node"),
            "noindex": Target("noindex", "debian12.tar", "slurm-node"),
            "pyxis": Target("pyxis", "debian12.tar", "slurm-node"),
        }
        procs = []
        for t in targets.values():
            t.root = workdir / t.name
            t.root.mkdir()
            tarball = CACHE / "rootfs" / t.tarball
            procs.append(subprocess.Popen(["tar", "-C", str(t.root), "-xpf", str(tarball)]))
        http_dir = workdir / "http"
        http_dir.mkdir()
        package = make_fake_apptainer_deb(http_dir)
        image = workdir / "dask-hpc-test.sif"  # content does not matter to the role
        image.write_bytes(os.urandom(1 << 16))
        handler = functools.partial(_QuietHandler, directory=str(http_dir))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        package_url = f"http://127.0.0.1:{server.server_address[1]}/{package.name}"
        for p in procs:
            assert p.wait(timeout=180) == 0, "unpacking a target failed"
        for t in targets.values():
            prepare_node(t.root, empty_lists=t.name == "ubuntu2204")
        master, node = targets["master"].root, targets["node"].root
        (master / "sw").mkdir(mode=0o755)
        (master / "etc/exports").write_text("/sw *(rw,sync,no_root_squash)\n")
        subprocess.run(["chroot", str(master), "groupadd", "--system", "slurm"], check=True)
        share = SshfsShare(workdir, master / "sw", [node / "sw"])
        pip_conf = targets["noindex"].root / "etc/pip.conf"
        pip_conf.write_text(pip_conf.read_text() + f"index-url = {UNREACHABLE_INDEX}\n")
        # The configured node's wheelhouse, where a cluster keeps it: on the shared file system.
        wheelhouse = targets["configured"].root / "srv/wheelhouse"
        subprocess.run(["cp", "-a", str(CACHE / "wheels/cp311"), str(wheelhouse)], check=True)
        targets["configured"].hostvars = {
            "dask_hpc_users": ["alice"],
            "dask_hpc_shared_dir": "/shared/dask-hpc",  # named, not found
            "dask_hpc_python_find_links": ["/srv/wheelhouse"],
            "dask_hpc_python_offline": True,
            "dask_hpc_python_extras": [],  # not dask-cuda, which the wheelhouse lacks
            "dask_hpc_apptainer": True,
            "dask_hpc_apptainer_package_url": package_url,
            "dask_hpc_apptainer_package_checksum": f"sha256:{sha256(package)}",
            "dask_hpc_gpu": "nvidia",  # a chroot shows no PCI devices: force the GPU path
            "dask_hpc_lmod": True,
            "dask_hpc_group_gid": 2500,
            "dask_hpc_sysctl_extra": {"net.ipv4.tcp_max_syn_backlog": 8192},
        }
        targets["pyxis"].hostvars = emulate_deepops_pyxis(targets["pyxis"].root, workdir)
        inventories = {
            name: write_inventory(workdir / f"inventory-{name}.json", [t])
            for name, t in targets.items()
            if name not in DEEPOPS
        }
        inventories["deepops"] = write_inventory(
            workdir / "inventory-deepops.json", [targets[n] for n in DEEPOPS]
        )
        # Two inventory hosts on one local file system: the shared-directory check must refuse.
        fresh = targets["fresh"]
        inventories["two-nodes"] = write_inventory(
            workdir / "inventory-two-nodes.json", [], {"node-a": fresh, "node-b": fresh}
        )
        TIMINGS["targets"] = time.monotonic() - start
        yield Env(workdir, targets, inventories, package, package_url, image, share)
    finally:
        start = time.monotonic()
        if share is not None:
            share.close()
        if server is not None:
            server.shutdown()
            server.server_close()
        if os.environ.get("DASK_HPC_KEEP_TARGETS") != "1":
            subprocess.run(["rm", "-rf", "--one-file-system", str(workdir)], check=False)
        TIMINGS["cleanup"] = time.monotonic() - start


def _fresh_runs(env: Env) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Runs against the never-converged node (inventory, arguments): none may change it."""
    image_bad = json.dumps(
        {
            "dask_hpc_provider": "image",
            "dask_hpc_apptainer": False,
            "dask_hpc_image_src": str(env.image),
            "dask_hpc_image_checksum": BAD_CHECKSUM,
        }
    )
    return {
        # With a package URL, and booleans and integers given as strings on the command line
        # (one true, one false: one --check run of ~28 CPU s covers both, with the wrapper's
        # tasks that the defaults reach).
        "check_fresh_package": (
            "fresh",
            (
                "--check",
                "--diff",
                "-e",
                env.package_vars(),
                "-e",
                "dask_hpc_wrapper=true",
                "-e",
                "dask_hpc_nofile=900000",
                "-e",
                "dask_hpc_lmod=no",
            ),
        ),  # fmt: skip
        # Two nodes, nothing shared: the default finds no shared directory; a named one on a
        # local file system is refused.
        "two_nodes_unshared": ("two-nodes", ()),
        "two_nodes_local_fs": ("two-nodes", ("-e", "dask_hpc_shared_dir=/shared/dask-hpc")),
        "index_unreachable": ("noindex", ()),
        # The check switched off: validation goes on to its last check, which refuses the image
        # provider on nodes without Apptainer.
        "two_nodes_check_off": (
            "two-nodes",
            (
                "-e",
                "dask_hpc_shared_dir_check=false",
                "-e",
                "dask_hpc_provider=image",
                "-e",
                "dask_hpc_apptainer=false",
                "-e",
                "dask_hpc_image=false",
            ),
        ),  # fmt: skip
        "wrong_type": ("fresh", ("-e", "dask_hpc_nofile=lots")),
        "wrong_choice": ("fresh", ("-e", "dask_hpc_gpu=amd")),
        "numeric_mode": ("fresh", ("-e", '{"dask_hpc_shared_dir_mode": 3770}')),
        "open_mode": ("fresh", ("-e", "dask_hpc_shared_dir_mode=3777")),
        "string_for_list": ("fresh", ("-e", "dask_hpc_python_extras=cuda")),
        "list_for_string": ("fresh", ("-e", '{"dask_hpc_group": ["dask-hpc"]}')),
        "image_without_source": ("fresh", ("-e", "dask_hpc_provider=image")),
        "apptainer_on_debian": ("fresh", ("-e", "dask_hpc_apptainer=true")),
        "unknown_user": ("fresh", ("-e", '{"dask_hpc_users": ["alice", "nosuchuser"]}')),
        "unknown_site": ("fresh", ("-e", "dask_hpc_site=deepop")),
        "bad_image_checksum": ("fresh", ("-e", image_bad)),
        "pyxis_asked_none_there": ("fresh", ("-e", "dask_hpc_container_runtime=pyxis")),
    }


Job = tuple[Path, tuple[str, ...], dict[str, str]]  # inventory, extra args, run_playbook options


def run_side_by_side(workdir: Path, jobs: dict[str, Job]) -> dict[str, PlaybookRun]:
    """Run each named playbook job at once; record how long each took."""
    with ThreadPoolExecutor(8) as pool:
        futures = {
            name: pool.submit(run_playbook, workdir, inventory, *args, **options)
            for name, (inventory, args, options) in jobs.items()
        }
        runs = {name: f.result() for name, f in futures.items()}
    for name, run in runs.items():
        TIMINGS[name] = run.seconds
    return runs


@pytest.fixture(scope="session")
def first_runs(env: Env) -> dict[str, PlaybookRun]:
    """Side by side: the first converge of the four targets, and every run against the fresh
    node (--check, refused settings)."""
    env.live_sysctl_before = live_sysctls()
    jobs: dict[str, Job] = {
        f"converge_{name}": (env.inventories[name], (), {}) for name in (*NO_VARS, "configured")
    }
    jobs["converge_deepops"] = (env.inventories["deepops"], (), DEEPOPS_RUN)
    jobs["converge_pyxis"] = (env.inventories["pyxis"], (), DEEPOPS_RUN)
    for name, (inventory, args) in _fresh_runs(env).items():
        jobs[name] = (env.inventories[inventory], args, {})
    return run_side_by_side(env.workdir, jobs)


@pytest.fixture(scope="session")
def converged(env: Env, first_runs: dict[str, PlaybookRun]) -> Env:
    """The converged targets (their first converge succeeded)."""
    for name in (*NO_VARS, "configured", "deepops"):
        run = first_runs[f"converge_{name}"]
        assert run.returncode == 0, run.describe()
    return env


@pytest.fixture(scope="session")
def reruns(converged: Env) -> dict[str, PlaybookRun]:
    """Side by side, on the converged targets: a second converge, and --check --diff."""
    jobs: dict[str, Job] = {}
    for name in (*NO_VARS, "configured"):
        jobs[f"again_{name}"] = (converged.inventories[name], (), {})
    jobs["again_deepops"] = (converged.inventories["deepops"], (), DEEPOPS_RUN)
    jobs["again_pyxis"] = (converged.inventories["pyxis"], (), {})  # the newest ansible-core
    for name in CHECKED:
        jobs[f"check_{name}"] = (converged.inventories[name], ("--check", "--diff"), {})
    return run_side_by_side(converged.workdir, jobs)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how long the real Ansible runs took."""
    if TIMINGS:
        terminalreporter.write_line(
            "ansible timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in TIMINGS.items())
        )
