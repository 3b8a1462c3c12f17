"""A real OpenSSH server on loopback, resolving ``localhost`` as Debian does by default.

The printed tunnel (``ssh -L PORT:HOST:PORT node``) is resolved by the node's sshd. This
machine's /etc/hosts has ``localhost`` on 127.0.0.1 only; Debian's, Ubuntu's and RHEL's
defaults also map it to ``::1``, which glibc then returns first. So sshd runs in a mount
namespace of its own (``unshare --mount``) where /etc/hosts is Debian's default, as on the
sites' nodes. Key authentication for the test's user, nothing else; the daemon is ended by
its pid, and the clients by theirs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .waiting import free_ports, wait_for

DEBIAN_HOSTS = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
SSHD = "/usr/sbin/sshd"

CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {root}/host_key
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
AllowTcpForwarding yes
"""


@dataclass
class Sshd:
    port: int
    root: Path
    process: subprocess.Popen[bytes]

    def client_options(self) -> list[str]:
        """What the test adds to a printed ssh command to reach this server as its user."""
        return [
            "-p", str(self.port), "-i", str(self.root / "client_key"),
            "-o", f"UserKnownHostsFile={self.root / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
        ]

    def resolve(self, name: str) -> list[str]:
        """The addresses ``name`` resolves to where sshd runs, in glibc's order."""
        script = f"mount --bind {self.root / 'hosts'} /etc/hosts && getent ahosts {name}"
        out = subprocess.run(
            ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True,
            timeout=30, check=True,
        ).stdout
        return [line.split()[0] for line in out.splitlines() if "STREAM" in line]

    def ssh(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` (an ssh command) with this server's options after ``ssh``."""
        assert argv[0] == "ssh", argv
        return subprocess.Popen(
            ["ssh", *self.client_options(), *argv[1:]],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, timeout=30)


@contextmanager
def sshd(root: Path) -> Iterator[Sshd]:
    """sshd on a free loopback port with Debian's /etc/hosts, until the block ends."""
    for tool in (SSHD, shutil.which("ssh"), shutil.which("unshare")):
        assert tool and os.path.exists(tool), "no OpenSSH: run tests/setup/packages.sh"
    root.mkdir(parents=True, exist_ok=True)
    _keygen(root / "host_key")
    _keygen(root / "client_key")
    shutil.copy(root / "client_key.pub", root / "authorized_keys")
    (root / "hosts").write_text(DEBIAN_HOSTS)
    port = free_ports(1)[0]
    (root / "sshd_config").write_text(CONFIG.format(port=port, root=root))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    script = (f"mount --bind {root / 'hosts'} /etc/hosts && "
              f"exec {SSHD} -D -e -f {root / 'sshd_config'}")
    log = open(root / "sshd.log", "wb")
    process = subprocess.Popen(["unshare", "--mount", "sh", "-c", script],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    server = Sshd(port, root, process)
    try:
        def listening() -> bool:
            assert process.poll() is None, (root / "sshd.log").read_text()
            return "Server listening" in (root / "sshd.log").read_text()

        wait_for(listening, 30, what="sshd listening")
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()
