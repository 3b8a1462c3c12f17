"""Processes: run commands with hard timeouts, tag them, find and kill tagged leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .waiting import WaitTimeout, wait_for

TAG_VAR = "DASK_HPC_TEST_TAG"

# Keep MPI runtimes on loopback and let Open MPI run as root with more ranks than cores.
SESSION_TMPDIR = os.environ.get("TMPDIR")  # before any test's own
TEST_TMP_VAR = "DASK_HPC_TEST_TMPDIR"  # the test's own TMPDIR (emulated jobs make theirs in it)

MPI_LOOPBACK_ENV = {
    "OMPI_MCA_oob_tcp_if_include": "lo",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_btl": "self,vader,tcp",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


@dataclass
class CmdResult:
    """Outcome of :func:`run_cmd`."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    def check(self) -> CmdResult:
        """Raise AssertionError with the output if the command failed or timed out."""
        if self.returncode != 0 or self.timed_out:
            raise AssertionError(
                f"{' '.join(self.argv)} -> rc={self.returncode} timed_out={self.timed_out}\n"
                f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
            )
        return self


def new_tag() -> str:
    """A fresh unique tag value."""
    return uuid.uuid4().hex


def tagged(env: Mapping[str, str], tag: str) -> dict[str, str]:
    """``env`` plus the tag and the loopback MPI settings."""
    out = dict(env)
    out.update(MPI_LOOPBACK_ENV)
    out[TAG_VAR] = tag
    return out


def clean_daemon_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the test tag or any launcher/batch variables (for long-lived daemons),
    with the session's TMPDIR, not the test's (removed when the test ends)."""
    drop = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "PALS_", "JSM_", "LSB_", "PBS_", "COBALT_", "FLUX_")
    own = (TAG_VAR, TEST_TMP_VAR)
    out = {k: v for k, v in env.items() if k not in own and not k.startswith(drop)}
    out.pop("TMPDIR", None)
    if SESSION_TMPDIR is not None:
        out["TMPDIR"] = SESSION_TMPDIR
    return out


def run_cmd(
    argv: Sequence[str],
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    grace: float = 5.0,
) -> CmdResult:
    """Run ``argv`` in its own session; on timeout TERM its process group, KILL after ``grace``.

    Never raises for a non-zero exit or a timeout: look at ``returncode``/``timed_out``
    (or call ``.check()``).
    """
    argv = [str(a) for a in argv]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env=dict(os.environ if env is None else env),
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    finally:
        if proc.poll() is None:  # e.g. KeyboardInterrupt: never leave it behind
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    if timed_out:
        # The test fails anyway; take what is left of the group with it.
        _signal_group(proc.pid, signal.SIGKILL)
    # After a normal exit nothing is killed here: a child that outlived its parent is a leak,
    # and the leak check after the test must see it and fail the test.
    return CmdResult(argv, proc.returncode, out or "", err or "", time.monotonic() - t0, timed_out)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def proc_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from /proc, or None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    state = proc_state(pid)
    return state is not None and state not in ("Z", "X")


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (or a placeholder when it vanished)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "<gone>"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "<no cmdline>"


def _own_lineage() -> set[int]:
    pids = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        pids.add(pid)
    return pids


def tagged_pids(tag: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries ``TAG_VAR=tag``."""
    needle = f"{TAG_VAR}={tag}".encode()
    skip = _own_lineage()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in skip:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and pid_alive(pid):
            found.append(pid)
    return sorted(found)


class LeakError(AssertionError):
    """Processes outlived the test that started them."""


def check_no_leaks(tag: str, timeout: float = 15.0, kill: bool = True) -> None:
    """Wait (bounded) until no process carries ``tag``; else kill them and raise LeakError."""
    try:
        wait_for(lambda: not tagged_pids(tag), timeout, interval=0.05,
                 what="tagged processes to exit")
        return
    except WaitTimeout:
        pass
    leaked = {pid: cmdline(pid) for pid in tagged_pids(tag)}
    if not leaked:
        return
    if kill:
        kill_pids(list(leaked))
    lines = "\n".join(f"  pid {pid}: {cmd}" for pid, cmd in leaked.items())
    raise LeakError(f"{len(leaked)} process(es) left after {timeout:.0f} s:\n{lines}")


def kill_pids(pids: Sequence[int], timeout: float = 10.0) -> None:
    """SIGKILL ``pids`` and wait until they are gone (zombies count as gone)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout, what=f"{list(pids)} to die")


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and everything below it, as a node's death ends them; the pids killed."""
    import psutil

    victim = psutil.Process(pid)
    procs = [victim, *victim.children(recursive=True)]
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return [p.pid for p in procs]
