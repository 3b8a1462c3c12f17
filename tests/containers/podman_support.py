"""What the podman-hpc tests share: podman-hpc 1.1.4 as tests/setup/podman.sh installs it, and
this test node's podman configuration (what /etc/containers is on a site's node).

This machine (a Firecracker VM, kernel 6.18) differs from a Perlmutter node in three ways that
podman's defaults meet, each shown by the exact refusal (podman 4.3.1, as root):

- crun, podman's default runtime here, refuses the hybrid cgroup layout (v1 controllers and a
  cgroup2 hierarchy with one, hugetlb): ``Error: OCI runtime error: crun: cgroups in hybrid mode
  not supported, drop all controllers from cgroupv2``. runc runs: ``runtime = "runc"``.
- root here lacks CAP_SYS_RESOURCE, and podman asks for rlimits above the hard ones (``Error:
  crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted``; podman lowers its own NPROC to
  kernel.pid_max, 32768, below the shell's 96365: ``setrlimit `RLIMIT_NPROC`: Operation not
  permitted``): ``default_ulimits`` ask what the node allows.
- no udev: /dev/fuse and /dev/net/tun were root's alone (``crw------- root root``), so the
  second user's rootless podman could not run fuse-overlayfs, podman-hpc's mount program
  (``fuse: failed to open /dev/fuse: Permission denied``), nor ``migrate`` its container's
  network (slirp4netns: ``open("/dev/net/tun"): Permission denied``). tests/setup/podman.sh
  gives them udev's default mode, 0666, as on any node with udev.

And one that a site's node has and Debian's package lacks: /etc/containers/storage.conf. With
none, rootless podman takes the vfs driver, which refuses podman-hpc's mount program (``vfs
driver does not support mount_program options``): the node's storage.conf names overlay.

None is a refusal of the kernel's: the jobs run podman-hpc for real, as root and as the second
user (rootless, with subordinate ids), with the node's configuration below; nothing is emulated.
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import pytest
from containers_support import CACHE

PODMAN_HPC = CACHE / "podman-hpc-1.1.4"


def need_podman() -> None:
    """Fail (never skip) where tests/setup/podman.sh has not run."""
    for path in (PODMAN_HPC / "venv" / "bin" / "podman-hpc", PODMAN_HPC / "podman_hpc.yaml"):
        if not path.exists():
            pytest.fail(f"{path} missing: run tests/setup/podman.sh (tests/setup/install.sh)")
    for tool in ("podman", "runc", "catatonit", "apptainer"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: run tests/setup/podman.sh (tests/setup/install.sh)")
    for device in ("/dev/fuse", "/dev/net/tun"):
        if os.stat(device).st_mode & 0o777 != 0o666:
            pytest.fail(f"{device} is not 0666 as udev makes it: run tests/setup/podman.sh")


def node_config(where: Path) -> Path:
    """This node's containers.conf (see the module's docstring): runc, the rlimits it allows."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(
        resource.getrlimit(resource.RLIMIT_NPROC)[1],
        int(Path("/proc/sys/kernel/pid_max").read_text()),
    )
    conf = where / "containers.conf"
    conf.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        '[engine]\nruntime = "runc"\n'
    )
    (where / "storage.conf").write_text(  # containers-storage's defaults, and the driver
        '[storage]\ndriver = "overlay"\nrunroot = "/run/containers/storage"\n'
        'graphroot = "/var/lib/containers/storage"\n'
    )
    for path in (conf, where / "storage.conf"):
        path.chmod(0o644)  # as /etc/containers: every user reads it
    return conf


def podman_env(where: Path) -> dict[str, str]:
    """What a Perlmutter login shell has for podman-hpc: it on PATH (with its mount program),
    its site config, the user's name; and this node's podman configuration."""
    return {
        "PATH": f"{PODMAN_HPC / 'venv' / 'bin'}:{os.environ['PATH']}",
        "PODMANHPC_CONFIG_FILE": str(PODMAN_HPC / "podman_hpc.yaml"),
        "CONTAINERS_CONF": str(node_config(where)),
        "CONTAINERS_STORAGE_CONF": str(where / "storage.conf"),
        "USER": os.environ.get("USER") or "root",
    }


def podman_processes(*markers: str) -> list[str]:
    """The processes whose command line names one of ``markers`` (a job's directory, its
    podman storage): podman, conmon, fuse-overlayfs, a rank's; zombies (reaped by no one on
    this VM's init) left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if state != "Z" and any(m in cmdline for m in markers):
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


def rank_stores() -> set[str]:
    """The podman storage directories of ranks on this node, and the mounts in them."""
    stores = {str(p) for p in Path("/tmp").glob("dask-hpc-podman_*")}
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    return stores | {m.split()[1] for m in mounts if " /tmp/dask-hpc-podman_" in m}


def rootless_leftovers(uid: int) -> list[str]:
    """What rootless podman leaves of user ``uid`` on the node unless told otherwise: its pause
    process (``catatonit -P``, which holds the user's namespace and which nothing ends) and its
    default run and storage directories (``/tmp/podman-run-UID``, podman-hpc's
    ``/tmp/UID_hpc`` and ``/tmp/containers-user-UID``: names another user of the node can make
    first), and podman-hpc's squashed-image store where SQUASH_DIR and SCRATCH are unset
    (``/tmp/storage``, which every podman-hpc command makes if missing and reads if there: a
    second user's job made it, 2026-12-01, in the removal of its store)."""
    defaults = (f"/tmp/podman-run-{uid}", f"/tmp/{uid}_hpc", f"/tmp/containers-user-{uid}")
    found = [path for path in defaults if Path(path).exists()]
    squash = Path("/tmp/storage")
    if squash.exists() and squash.stat().st_uid == uid:
        found.append(str(squash))
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or entry.stat().st_uid != uid:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, IndexError):
            continue
        if state != "Z" and cmdline.startswith("catatonit -P"):
            found.append(f"{entry.name}: {cmdline}")
    return found
