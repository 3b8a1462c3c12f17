"""Helpers for the Ansible role's tests: real ansible-playbook runs against debootstrap'd root
filesystems (Debian 12, Ubuntu 22.04, Ubuntu 24.04) through the community.general chroot
connection, and commands run inside them as on a real node.

tests/setup/ansible.sh prepares the cache (root filesystem tarballs, a wheelhouse, the
community.general collection); each test session unpacks fresh targets from it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import select
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
SITE = ANSIBLE_DIR / "site.yml"
CACHE = Path(os.environ.get("DASK_HPC_ANSIBLE_CACHE", "/var/tmp/dask-hpc-tests/ansible"))
COLLECTIONS = CACHE / "collections"
TARBALLS = ("debian12.tar", "ubuntu2204.tar", "ubuntu2404.tar")
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.M,
)
TIMINGS: dict[str, float] = {}
# This machine's settings that a chroot target would inherit through the chroot connection (a
# real node, reached over SSH, would not): pip's and the TLS libraries' CA and index settings.
HOST_ONLY_ENV = ("PIP_", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
# What the role creates on a node; none of it may appear on a node that --check or a refused
# run touched.
ROLE_PATHS = (
    "shared",
    "opt/dask-hpc",
    "usr/share/deepops",
    "etc/dask",
    "etc/ansible/facts.d/dask_hpc.fact",
    "etc/sysctl.d/90-dask-hpc.conf",
    "etc/security/limits.d/90-dask-hpc.conf",
    "usr/local/bin/start-cluster",
)


@dataclass
class Target:
    """One root filesystem converged as one inventory host."""

    name: str
    tarball: str
    group: str  # slurm-node or slurm-master
    hostvars: dict[str, object] = field(default_factory=dict)
    root: Path = Path()


@dataclass
class PlaybookRun:
    """The outcome of one ansible-playbook run."""

    args: list[str]
    returncode: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP counters per host."""
        return {
            m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in RECAP.finditer(self.output)
        }

    def changed_tasks(self) -> list[str]:
        """The names of the tasks that reported a change."""
        names, current = [], ""
        for line in self.output.splitlines():
            if line.startswith("TASK ["):
                current = line[6:].split("]", 1)[0]
            elif line.startswith("changed: ") and current not in names:
                names.append(current)
        return names

    def describe(self) -> str:
        """The command and the tail of its output, for assertion messages."""
        return f"$ {shlex.join(self.args)}\n(rc={self.returncode})\n{self.output[-6000:]}"


def require_setup() -> None:
    """Fail loudly when tests/setup/ansible.sh has not prepared what the tests need."""
    missing = [
        str(p)
        for p in (
            COLLECTIONS / "ansible_collections/community/general/plugins/connection/chroot.py",
            *(CACHE / "rootfs" / t for t in TARBALLS),
            CACHE / "wheels/cp311",
        )
        if not p.exists()
    ]
    for tool in ("ansible-playbook", "ansible-lint", "dpkg-deb", "unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if os.geteuid() != 0:
        missing.append("root (chroot needs it)")
    if missing:
        pytest.fail(
            "missing for the Ansible tests: " + ", ".join(missing) + "; run tests/setup/ansible.sh",
            pytrace=False,
        )


def ansible_env(workdir: Path) -> dict[str, str]:
    """Environment for ansible-playbook: our collection path, no colours, no stray config, the
    controller's cache (built wheel, fetched packages) inside workdir."""
    cfg = workdir / "ansible.cfg"
    cfg.write_text(
        "[defaults]\n"
        f"collections_path = {COLLECTIONS}\n"
        "forks = 4\n"
        "pipelining = True\n"
        f"roles_path = {ANSIBLE_DIR / 'roles'}\n"
        "interpreter_python = auto_silent\n"
        f"local_tmp = {workdir / 'ansible-local'}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(HOST_ONLY_ENV)}
    env.update(
        ANSIBLE_CONFIG=str(cfg),
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        PYTHONUNBUFFERED="1",
        XDG_CACHE_HOME=str(workdir / "controller-cache"),
    )
    return env


def run_playbook(
    workdir: Path,
    inventory: Path,
    *extra: str,
    playbook: Path = SITE,
    timeout: float = 600,
) -> PlaybookRun:
    """Run ansible-playbook for real and capture its output."""
    args = ["ansible-playbook", "-i", str(inventory), str(playbook), *extra]
    start = time.monotonic()
    proc = subprocess.run(
        args,
        cwd=workdir,
        env=ansible_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(args, proc.returncode, proc.stdout, time.monotonic() - start)


def write_inventory(
    path: Path, targets: Iterable[Target], names: Mapping[str, Target] | None = None
) -> Path:
    """A YAML-plugin (JSON) inventory with DeepOps' groups holding these targets (or, with
    names, these host names for targets; several names may share one root filesystem)."""
    hosts = dict(names) if names is not None else {t.name: t for t in targets}
    groups: dict[str, dict[str, dict[str, object]]] = {"slurm-node": {}, "slurm-master": {}}
    for name, t in hosts.items():
        groups[t.group][name] = {
            "ansible_host": str(t.root),
            "ansible_connection": "community.general.chroot",
            "ansible_become": False,
            "ansible_python_interpreter": "/usr/bin/python3",
            **t.hostvars,
        }
    children = {g: {"hosts": h} for g, h in groups.items() if h}
    path.write_text(
        json.dumps({"all": {"children": {"slurm-cluster": {"children": children}}}}, indent=1)
    )
    return path


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


class NetNode:
    """An emulated node: its own network and UTS namespaces (host name, an address on a veth
    pair), held open by a process that exits when its stdin closes. Commands enter it with
    run_on_node(..., netns_pid=node.pid)."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--uts", "sh", "-c",
             f"hostname {shlex.quote(hostname)} && echo ready && exec cat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )  # fmt: skip
        self.pid = self.proc.pid
        # Only once it says so are its namespaces in place (before, nsenter would enter this
        # machine's own network namespace).
        assert self.proc.stdout is not None
        ready = select.select([self.proc.stdout], [], [], 30)[0]
        if not ready or self.proc.stdout.readline() != b"ready\n":
            self.close()
            raise AssertionError(f"emulated node {hostname}: unshare --net --uts did not start")
        own = os.readlink(f"/proc/{self.pid}/ns/net")
        if own == os.readlink("/proc/self/ns/net"):
            self.close()
            raise AssertionError(f"emulated node {hostname} shares this machine's network")

    def ip(self, *args: str) -> None:
        """Run `ip ARGS` inside this node's network namespace."""
        subprocess.run(
            ["nsenter", f"--target={self.pid}", "--net", "ip", *args],
            check=True,
            capture_output=True,
            timeout=30,
        )

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def connect_nodes(a: NetNode, a_ip: str, b: NetNode, b_ip: str) -> None:
    """A veth pair between two emulated nodes, both on a /24, each with a default route."""
    a.ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", str(b.pid))
    for node, address in ((a, a_ip), (b, b_ip)):
        node.ip("addr", "add", f"{address}/24", "dev", "eth0")
        node.ip("link", "set", "eth0", "up")
        node.ip("link", "set", "lo", "up")
        node.ip("route", "add", "default", "dev", "eth0")


def wait_output(
    proc: subprocess.Popen[str], pattern: str, timeout: float, lines: list[str]
) -> re.Match[str]:
    """Read proc's stdout (stderr merged) line by line until pattern matches, waiting on the pipe
    (select) at most timeout seconds in all; lines collects what was read."""
    deadline = time.monotonic() + timeout
    regex = re.compile(pattern)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffer = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        for raw in done:
            line = raw.decode(errors="replace")
            lines.append(line)
            m = regex.search(line)
            if m:
                return m
    lines.append(buffer.decode(errors="replace"))
    raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n" + "\n".join(lines))


def shell(argv: Sequence[str]) -> str:
    """A command line for messages."""
    return shlex.join(argv)
