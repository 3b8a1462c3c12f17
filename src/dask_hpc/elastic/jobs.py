"""One batch job of an elastic cluster, and the batch system's commands run for the cluster.

A job goes submitted -> queued -> running -> ended, as the batch system reports it; the
cluster adds what Dask says (its workers, by name) and what it asked (retire, cancel).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..batch.commands import BatchSystem, State
from ..errors import UsageError
from ..guard import private_files

COMMAND_TIMEOUT = 60.0  # a batch command that takes longer is stuck (a hung controller)


@dataclass
class Job:
    """One job: its batch state, its workers, and what the cluster asked of it."""

    name: str  # the batch job's name and its workers' name prefix
    pool: str
    log: Path
    job_id: str | None = None
    state: State | None = None  # None: being submitted
    batch_state: str = ""  # the batch system's own word for it
    reason: str = ""  # and why, where it says (Flux: the note of the exception that ended it)
    submitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None  # first seen running
    connected_at: float | None = None  # first worker connected
    empty_since: float | None = None  # running, and none of its workers connected
    workers: dict[str, str] = field(default_factory=dict)  # address -> name, connected now
    ever_connected: int = 0
    retiring: bool = False  # the cluster retires its workers (scale down)
    cancelled: bool = False  # the cluster cancelled it
    expiring: bool = False  # its workers retire soon (walltime): its replacement is asked for
    missing: int = 0  # status reads in a row that did not list it

    @property
    def ended(self) -> bool:
        return self.state == "ended"

    def log_tail(self, lines: int = 3) -> str:
        """The last lines of the job's output, on one line."""
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return f"no output at {self.log}"
        return " | ".join(line.strip() for line in text[-lines:]) or f"{self.log} is empty"


async def run(
    argv: Sequence[str],
    stdin: bytes | None = None,
    timeout: float = COMMAND_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str, str]:
    """Run a batch command; (status, stdout, stderr). A missing command is a UsageError."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        raise UsageError(
            f"{argv[0]} not found", "load the batch system's module, or fix PATH"
        ) from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "", f"{argv[0]} did not answer within {timeout:g} s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def one_line(text: str) -> str:
    return " ".join(text.split())[:300]


class BatchClient:
    """The cluster's side of the batch system: submit, read states, cancel."""

    def __init__(self, system: BatchSystem, script_dir: Path) -> None:
        self.system = system
        self.script_dir = script_dir

    async def submit(self, job: Job, text: str) -> str:
        """Submit ``text`` as ``job``; its id, or a UsageError with the batch system's words."""
        path = self.script_dir / f"{job.name}.sh"
        private_files.write_file(path, text.encode(), mode=0o700)
        argv, use_stdin = self.system.submit_argv(str(path))
        stdin = text.encode() if use_stdin else None
        code, out, err = await run(argv, stdin=stdin, env=self.system.command_env())
        job_id = self.system.job_id(out) if code == 0 else None
        if job_id is None:
            said = one_line(err or out) or f"exit status {code}"
            raise UsageError(f"{argv[0]} refused job {job.name}: {said}", f"see {path}")
        return job_id

    async def states(self, ids: Sequence[str]) -> dict[str, tuple[str, str]] | None:
        """(state, reason) of each job the batch system lists (None: cannot read them now)."""
        if not ids:
            return {}
        code, out, err = await run(self.system.status_argv(ids), env=self.system.command_env())
        return self.system.parse_status(out, err, code)

    async def cancel(self, ids: Sequence[str]) -> None:
        if ids:
            await run(self.system.cancel_argv(ids), env=self.system.command_env())
