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
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harness.waiting import free_ports, wait_for

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
# ansible-core as DeepOps pins it (scripts/setup.sh: Ansible 10.7.0, ansible-core 2.17), in a
# venv of its own made by tests/setup/ansible.sh; the newest is the one on PATH.
CORE_217 = CACHE / "venv-ansible-core-2.17"
CORES = {"2.17": CORE_217 / "bin", "newest": None}
# DeepOps' ansible.cfg (NVIDIA/deepops), what ansible-playbook run from a DeepOps checkout reads,
# less its paths into that checkout (roles, collections: the tests' own come below).
DEEPOPS_CFG = {
    "inventory": "./config/inventory",
    "host_key_checking": "False",
    "gathering": "smart",
    "fact_caching": "jsonfile",
    "fact_caching_connection": "{workdir}/ansible_cache",
    "fact_caching_timeout": "86400",
    "deprecation_warnings": "False",
    "stdout_callback": "ansible.builtin.default",
    "result_format": "yaml",
    "bin_ansible_callbacks": "True",
    "forks": "25",
    "force_valid_group_names": "ignore",
    "ansible_python_interpreter": "/usr/bin/python3",
}
TIMINGS: dict[str, float] = {}
# This machine's settings that a chroot target would inherit through the chroot connection (a
# real node, reached over SSH, would not): pip's and the TLS libraries' CA and index settings.
HOST_ONLY_ENV = ("PIP_", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
# What the role creates on a node; none of it may appear on a node that --check or a refused
# run touched.
ROLE_PATHS = (
    "sw",
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
            CORE_217 / "bin/ansible-playbook",
        )
        if not p.exists()
    ]
    tools = ("ansible-playbook", "ansible-lint", "dpkg-deb", "unshare", "nsenter", "ip", "sshfs")
    for tool in tools:
        if shutil.which(tool) is None:
            missing.append(tool)
    if os.geteuid() != 0:
        missing.append("root (chroot needs it)")
    if missing:
        pytest.fail(
            "missing for the Ansible tests: " + ", ".join(missing) + "; run tests/setup/ansible.sh",
            pytrace=False,
        )


def ansible_config(workdir: Path, config: str = "checkout") -> Path:
    """An ansible.cfg for the runs: "checkout" is this checkout's ansible.cfg (what an admin
    running from it reads), "deepops" DeepOps' settings; both with the tests' collection path
    (the chroot connection) and a local_tmp inside workdir."""
    if config == "deepops":
        settings = {k: v.format(workdir=workdir) for k, v in DEEPOPS_CFG.items()}
        text = "[defaults]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
    else:
        text = (REPO / "ansible.cfg").read_text()
    text += (
        f"collections_path = {COLLECTIONS}\n"
        "pipelining = True\n"
        f"roles_path = {ANSIBLE_DIR / 'roles'}\n"
        f"local_tmp = {workdir / 'ansible-local'}\n"
    )
    cfg = workdir / f"ansible-{config}.cfg"
    partial = cfg.with_name(f"{cfg.name}.{threading.get_ident()}")
    partial.write_text(text + "\n")
    partial.replace(cfg)  # runs side by side read it: never half written
    return cfg


def ansible_env(workdir: Path, core: str = "newest", config: str = "checkout") -> dict[str, str]:
    """Environment for ansible-playbook: ansible-core ``core`` ("2.17" or "newest"), the
    ``config`` ansible.cfg, our collection path, no colours, the controller's cache (built
    wheel, fetched packages) inside workdir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(HOST_ONLY_ENV)}
    env.update(
        ANSIBLE_CONFIG=str(ansible_config(workdir, config)),
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        PYTHONUNBUFFERED="1",
        XDG_CACHE_HOME=str(workdir / "controller-cache"),
    )
    bindir = CORES[core]
    if bindir is not None:
        env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env


def run_playbook(
    workdir: Path,
    inventory: Path,
    *extra: str,
    playbook: Path = SITE,
    timeout: float = 600,
    core: str = "newest",
    config: str = "checkout",
) -> PlaybookRun:
    """Run ansible-playbook for real (ansible-core ``core``, ansible.cfg ``config``) and capture
    its output."""
    args = ["ansible-playbook", "-i", str(inventory), str(playbook), *extra]
    start = time.monotonic()
    proc = subprocess.run(
        args,
        cwd=workdir,
        env=ansible_env(workdir, core, config),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(args, proc.returncode, proc.stdout, time.monotonic() - start)


def warnings(run: PlaybookRun) -> list[str]:
    """The warnings ansible-playbook printed ([WARNING], [DEPRECATION WARNING])."""
    warning = re.compile(r"\[(DEPRECATION )?WARNING\]")
    return [line for line in run.output.splitlines() if warning.match(line)]


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


def deepops_example(root1: Path, root2: Path, user: str, shared: str) -> None:
    """DeepOps' dask-rapids example command lines on two emulated nodes, virtual-gpu01
    (10.0.0.11, root filesystem root1) and virtual-gpu02 (10.0.0.12, root2), one GPU each
    (CUDA_VISIBLE_DEVICES=0: plain Dask workers, no GPU is touched), as ``user``: the scheduler
    on gpu01, the worker call on gpu01 starts nothing more, gpu02's joins through the scheduler
    files in ``shared``; a client sees one worker per node, computes, shuts the cluster down, and
    every process exits."""
    scripts = "/usr/share/deepops"
    gpu01, gpu02 = NetNode("virtual-gpu01"), NetNode("virtual-gpu02")
    procs: list[subprocess.Popen[str]] = []
    lines: list[str] = []
    home = "root" if user == "root" else f"home/{user}"
    try:
        connect_nodes(gpu01, "10.0.0.11", gpu02, "10.0.0.12")
        one_gpu = {"CUDA_VISIBLE_DEVICES": "0", "DASK_HPC__TIMEOUT": "120"}

        def start(root: Path, node: NetNode, command: str) -> subprocess.Popen[str]:
            argv = node_argv(root, command, user, one_gpu, netns_pid=node.pid)
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            procs.append(proc)
            return proc

        scheduler = start(root1, gpu01, f"{scripts}/launch-dask-scheduler.sh")
        ready = wait_output(scheduler, r"scheduler file\s+(\S+)", 180, lines)
        scheduler_file = ready.group(1)
        assert scheduler_file.startswith(f"{shared}/"), lines
        assert any("tls://10.0.0.11:8786" in line for line in lines), lines

        same_node = run_on_node(
            root1, f"{scripts}/launch-dask-cuda-worker.sh 10.0.0.11 8786", user, one_gpu,
            netns_pid=gpu01.pid,
        )  # fmt: skip
        assert same_node.returncode == 0, same_node.stderr
        assert "runs on this node (virtual-gpu01), with its workers: nothing to start here" in (
            same_node.stdout
        )

        worker = start(root2, gpu02, f"{scripts}/launch-dask-cuda-worker.sh 10.0.0.11 8786")
        client = f"""
from dask_hpc import connect
client = connect({scheduler_file!r})
client.wait_for_workers(2, timeout=120)
hosts = sorted(w["host"] for w in client.scheduler_info()["workers"].values())
print(hosts, client.submit(sum, [1, 2, 3]).result())
client.shutdown()
"""
        (root2 / home / "seed_client.py").write_text(client)
        result = run_on_node(
            root2, "cd && /opt/dask-hpc/venv/bin/python seed_client.py", user,
            netns_pid=gpu02.pid, timeout=240,
        )  # fmt: skip
        assert result.returncode == 0, (result.stdout, result.stderr, lines)
        assert result.stdout.strip() == "['10.0.0.11', '10.0.0.12'] 6", result.stdout
        for proc in (scheduler, worker):
            proc.wait(timeout=120)
        worker_output = worker.stdout.read() if worker.stdout else ""
        assert f"1 GPU worker(s) joining {shared}/dask-hpc-" in worker_output, worker_output
        assert scheduler.returncode == 0, lines
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()  # unshare --kill-child takes the node's processes with it
                proc.wait(timeout=30)
        gpu01.close()
        gpu02.close()


def shell(argv: Sequence[str]) -> str:
    """A command line for messages."""
    return shlex.join(argv)


class SshfsShare:
    """A directory of one target shared with other targets through a network file system:
    sshfs (FUSE, the SFTP protocol) over an sshd on loopback. This kernel has neither an NFS
    client nor an NFS server (no nfs in /proc/filesystems, no modules to load), so two test nodes
    cannot mount a real NFS export; sshfs is the network file system that runs here.

    What differs from NFS: every access goes through the one SSH login (root), so a file a user
    creates belongs to root on the server (NFS with AUTH_SYS carries each caller's uid and gid),
    and the kernel checks permissions from the attributes sshfs shows (``default_permissions``).
    Caching is off (``cache=no``, zero FUSE timeouts): what one node writes, the other sees at
    once, where NFS gives close-to-open consistency and attribute caching of a few seconds.

    The sshd and sshfs processes are the session's: they do not carry a test's tag, and close()
    stops them (an unmount ends sshfs; sshd gets SIGTERM)."""

    def __init__(self, workdir: Path, export: Path, mounts: Sequence[Path]) -> None:
        self.dir = workdir / "sshfs"
        self.dir.mkdir()
        self.export = export
        self.mounts: list[Path] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {k: v for k, v in os.environ.items() if k != "DASK_HPC_TEST_TAG"}
        for key in ("host", "client"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / key)],
                check=True,
            )
        shutil.copyfile(self.dir / "client.pub", self.dir / "authorized_keys")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
        self.port = free_ports(1)[0]
        try:
            self._start_sshd()
            for mount in mounts:
                self._mount(mount)
        except BaseException:
            self.close()
            raise

    def _start_sshd(self) -> None:
        options = {
            "ListenAddress": "127.0.0.1",
            "HostKey": self.dir / "host",
            "AuthorizedKeysFile": self.dir / "authorized_keys",
            "PidFile": self.dir / "sshd.pid",
            "PermitRootLogin": "prohibit-password",
            "PasswordAuthentication": "no",
            "StrictModes": "no",
            "UsePAM": "no",
            "Subsystem": "sftp internal-sftp",
        }
        argv = ["/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null", "-p", str(self.port)]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        log = (self.dir / "sshd.log").open("wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=log, env=self.env))

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(listening, 30, what=f"sshd on 127.0.0.1:{self.port}")

    def _mount(self, mount: Path) -> None:
        mount.mkdir(parents=True, exist_ok=True)
        options = ",".join(
            [
                f"IdentityFile={self.dir / 'client'}",
                "StrictHostKeyChecking=no",
                "UserKnownHostsFile=/dev/null",
                "BatchMode=yes",
                "LogLevel=ERROR",
                "allow_other",
                "default_permissions",
                "cache=no",
                "attr_timeout=0",
                "entry_timeout=0",
                "negative_timeout=0",
            ]
        )
        argv = ["sshfs", "-f", "-p", str(self.port), "-o", options,
                f"root@127.0.0.1:{self.export}", str(mount)]  # fmt: skip
        log_path = self.dir / f"sshfs-{len(self.mounts)}.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=self.env)
        self.procs.append(proc)
        self.mounts.append(mount)

        def mounted() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"sshfs exited ({proc.returncode}): {log_path.read_text()}")
            return os.path.ismount(mount)

        wait_for(mounted, 30, what=f"sshfs at {mount}")

    def fs_type(self, mount: Path) -> str:
        """The mount's type as findmnt shows it (fuse.sshfs)."""
        out = subprocess.run(
            ["findmnt", "-n", "-o", "FSTYPE", "--mountpoint", str(mount)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return out.stdout.strip()

    def close(self) -> None:
        for mount in self.mounts:
            if os.path.ismount(mount):
                subprocess.run(["umount", str(mount)], check=False, capture_output=True)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
