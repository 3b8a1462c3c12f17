"""Two emulated nodes on a network of their own (namespaces, a veth pair), a shared file system
between them (sshfs), and DeepOps' own example run across them."""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from harness.waiting import free_ports, wait_for
from node_support import node_argv, run_on_node


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
