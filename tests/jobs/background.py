"""Helpers for tests that keep a launcher running while they poke at it (faults, security).

``Background`` runs an argv in its own session with output in files, so a test can wait for a
line, send signals and wait for the exit; ``rank_pids`` finds the start-cluster rank processes
(not their forked scheduler/workers) by the test's tag.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil
from harness.procs import TAG_VAR, tagged_pids
from harness.waiting import WaitTimeout, wait_for

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "FLUX_TASK_RANK", "SLURM_PROCID")


class Background:
    """A launcher (mpiexec, srun, start-cluster) running in the background.

    Every instance is listed in ``Background.all``; call :meth:`kill_all` in a fixture's
    teardown so a failed test does not leave its launcher to the leak check.
    """

    all: list[Background] = []

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        workdir: Path,
        name: str = "run",
        cwd: Path | None = None,
    ) -> None:
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        self.argv = [str(a) for a in argv]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.started = time.monotonic()
        Background.all.append(self)

    @classmethod
    def kill_all(cls) -> None:
        while cls.all:
            cls.all.pop().kill()

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def output(self) -> str:
        return f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    def wait_text(self, text: str, timeout: float = 30.0, where: str = "stderr") -> None:
        """Wait until ``text`` appears in stdout or stderr; fail if the launcher exits first."""

        def seen() -> bool:
            if text in getattr(self, where):
                return True
            assert self.proc.poll() is None, (
                f"exited {self.proc.returncode} before {text!r}:\n{self.output()}"
            )
            return False

        try:
            wait_for(seen, timeout, what=f"{text!r} in {where}")
        except WaitTimeout as error:
            raise AssertionError(f"{error}\n{self.output()}") from None

    def wait(self, timeout: float) -> int:
        """The exit status; on timeout the whole session is killed and the test fails."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{' '.join(self.argv)} still running after {timeout} s:\n{self.output()}"
            ) from None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def listening_on(self, port: int) -> set[str]:
        """The addresses its processes (the launcher and all below it) listen on at ``port``:
        read from the owner's side, so another process that happens to hold that port number
        on another address is never mistaken for ours."""
        procs = [psutil.Process(self.proc.pid)]
        procs += procs[0].children(recursive=True)
        found = set()
        for proc in procs:
            try:
                conns = proc.net_connections(kind="inet")
            except psutil.NoSuchProcess:
                continue
            found |= {c.laddr.ip for c in conns
                      if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        return found

    def kill(self) -> None:
        """SIGKILL the launcher's whole session (teardown; the leak check does the rest)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def routable() -> tuple[str, str]:
    """(interface, IPv4 address) of a non-loopback interface; fails loudly when there is none."""
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family == socket.AF_INET and not addr.address.startswith("127."):
                return name, addr.address
    raise AssertionError("this machine has no non-loopback IPv4 address to test against")


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    items = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in items}


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _is_start_cluster(pid: int) -> bool:
    """True for a start-cluster process (python .../start-cluster), not a launcher naming it."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
    except OSError:
        return False
    return any(os.path.basename(a.decode(errors="replace")) == "start-cluster" for a in argv)


def rank_pids(tag: str | None = None) -> dict[int, int]:
    """{rank: pid} of the start-cluster rank processes carrying ``tag`` (not their children)."""
    tag = tag or os.environ[TAG_VAR]
    ranks: dict[int, int] = {}
    for pid in tagged_pids(tag):
        if not _is_start_cluster(pid) or _is_start_cluster(_ppid(pid)):
            continue
        env = _environ(pid)
        for var in RANK_VARS:
            if env.get(var, "").isdigit():
                ranks[int(env[var])] = pid
                break
        else:
            ranks[0] = pid  # no launcher: local mode
    return ranks
