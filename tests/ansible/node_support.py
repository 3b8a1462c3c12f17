"""Commands run inside a converged target as on a real node (its own mount, PID and, for two
nodes, network namespace), and what a node is prepared with before a converge."""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from ansible_support import CACHE

LIVE_SYSCTLS = ("net/core/somaxconn", "net/ipv4/tcp_max_syn_backlog", "user/max_user_namespaces")


def run_base() -> Path:
    """Where a session's targets live: a tmpfs when there is room (dpkg's many fsyncs and the
    clean-up of ~1 GB of small files cost minutes on a busy disk), else the cache directory."""
    override = os.environ.get("DASK_HPC_ANSIBLE_RUNDIR")
    if override:
        return Path(override)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize > 6 << 30 and not st.f_flag & os.ST_NOEXEC:
            return shm
    return CACHE


def live_sysctls() -> dict[str, str]:
    """This machine's live values of the sysctls the role writes (a chroot must not change them)."""
    return {k: (Path("/proc/sys") / k).read_text().strip() for k in LIVE_SYSCTLS}


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def node_argv(
    root: Path,
    command: str,
    user: str = "root",
    env: Mapping[str, str] | None = None,
    netns_pid: int | None = None,
) -> list[str]:
    """argv that runs ``command`` (sh -c) in the target as ``user`` would on a real node: its
    own /proc and /dev/shm (in private mount and PID namespaces, so nothing stays mounted and
    everything in it dies with it), a clean login environment, the user's groups from the
    target's /etc/group. With netns_pid, in that process's network and UTS namespaces (an
    emulated node of its own)."""
    home = "/root" if user == "root" else f"/home/{user}"
    variables = {
        "HOME": home,
        "USER": user,
        "LOGNAME": user,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }
    variables.update(env or {})
    tag = os.environ.get("DASK_HPC_TEST_TAG")
    if tag:
        variables["DASK_HPC_TEST_TAG"] = tag  # the harness finds leftovers by it
    inner = ["env", "-i", *(f"{k}={v}" for k, v in variables.items()), "sh", "-c", command]
    if user != "root":
        inner = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", *inner]
    setup = f"mount -t tmpfs -o mode=1777 tmpfs {shlex.quote(str(root / 'dev/shm'))} && exec " + (
        shlex.join(["chroot", str(root), *inner])
    )
    argv = ["unshare", "--mount", "--pid", "--fork", "--kill-child"]
    argv += [f"--mount-proc={root}/proc", "--propagation", "private", "sh", "-c", setup]
    if netns_pid is not None:
        argv = ["nsenter", f"--target={netns_pid}", "--net", "--uts", *argv]
    return argv


def run_on_node(
    root: Path,
    command: str,
    user: str = "root",
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
    netns_pid: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in the target (see node_argv) and wait for it."""
    return subprocess.run(
        node_argv(root, command, user, env, netns_pid),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def prepare_node(root: Path, empty_lists: bool = False) -> None:
    """What a site's node has before the role runs: a user account, and pip configured for the
    package index it can reach (this machine's CA bundle, for sites whose HTTPS goes through their
    own CA). With empty_lists, apt's package lists are removed and stamped fresh (younger than a
    day), as on a node whose lists lack what the role needs."""
    subprocess.run(
        ["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/sh", "alice"],
        check=True,
        capture_output=True,
    )
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.is_file():
        ca = root / "usr/local/share/dask-hpc-test/ca.crt"
        ca.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle, ca)
        (root / "etc/pip.conf").write_text(
            "[global]\ncert = /usr/local/share/dask-hpc-test/ca.crt\n"
        )
    if empty_lists:
        lists = root / "var/lib/apt/lists"
        for f in lists.iterdir():
            if f.is_file() and f.name != "lock":
                f.unlink()
        for cache in (root / "var/cache/apt").glob("*.bin"):
            cache.unlink()
        stamp = root / "var/lib/apt/periodic/update-success-stamp"
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
        os.utime(lists)


def make_fake_apptainer_deb(directory: Path) -> Path:
    """A .deb named apptainer that stands in for an Apptainer release package (no release server
    is reachable here): it exercises the role's fetch-once, copy and install path, not Apptainer."""
    build = directory / "apptainer-deb"
    (build / "DEBIAN").mkdir(parents=True)
    (build / "usr/bin").mkdir(parents=True)
    (build / "DEBIAN/control").write_text(
        "Package: apptainer\nVersion: 0.0.0~dask.hpc.test\nArchitecture: all\n"
        "Maintainer: dask-hpc tests <tests@invalid>\n"
        "Description: stand-in for an Apptainer release package (dask-hpc tests)\n"
    )
    tool = build / "usr/bin/apptainer"
    tool.write_text('#!/bin/sh\necho "apptainer version 0.0.0 (dask-hpc test stand-in)"\n')
    tool.chmod(0o755)
    out = directory / "apptainer_0.0.0_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(build), str(out)],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(build)
    return out
