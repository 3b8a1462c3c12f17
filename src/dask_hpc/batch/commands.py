"""Submit, read back and cancel batch jobs: each batch system's commands and output formats come
from its row of ``systems.yaml``; this module only fills in argv and parses what comes back."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import UsageError
from .script import data, system_table

State = Literal["queued", "running", "ended"]


@dataclass(frozen=True)
class BatchSystem:
    """One batch system's commands, from its table row."""

    name: str
    row: Mapping[str, Any]

    @classmethod
    def named(cls, name: str) -> BatchSystem:
        """The batch system ``name``; a UsageError when it has no commands to drive jobs with."""
        row = system_table(name)
        if not row.get("commands"):
            raise UsageError(
                f"batch system {name} has no submit/status/cancel commands here "
                "(only job scripts)",
                "use a site on Slurm, PBS Pro, LSF or Flux",
            )
        return cls(name, row)

    def command_env(self) -> dict[str, str] | None:
        """The environment its commands run with (this process's, plus the row's
        ``command_env``), or None when the row adds nothing."""
        extra = self.row.get("command_env")
        return {**os.environ, **{k: str(v) for k, v in extra.items()}} if extra else None

    @property
    def listing_lag(self) -> float:
        """Seconds its job listing may lag behind a job's start (the row's ``listing_lag``)."""
        return float(self.row.get("listing_lag") or 0)

    def missing_commands(self, which: Callable[[str], str | None] = shutil.which) -> list[str]:
        return [c for c in self.row["commands"] if which(c) is None]

    def _argv(self, template: Sequence[str], ids: Sequence[str] = (), **fields: str) -> list[str]:
        argv: list[str] = []
        for arg in template:
            if arg == "{ids}":
                argv += list(ids)
            else:
                joined = str(self.row.get("ids_joiner", " ")).join(ids)
                argv.append(arg.replace("{ids}", joined).format(**fields) if "{" in arg else arg)
        return argv

    def submit_argv(self, script: str) -> tuple[list[str], bool]:
        """(argv, whether the script goes on stdin) to submit the script file ``script``."""
        stdin = bool(self.row.get("submit_stdin"))
        return self._argv(self.row["submit"], script=script), stdin

    def job_id(self, stdout: str) -> str | None:
        """The job id in the submit command's output, if it is there."""
        match = re.search(self.row["job_id"], stdout, re.MULTILINE)
        return match.group("id") if match else None

    def status_argv(self, ids: Sequence[str]) -> list[str]:
        return self._argv(self.row["status"], ids)

    def cancel_argv(self, ids: Sequence[str]) -> list[str]:
        return self._argv(self.row["cancel"], ids)

    def parse_status(
        self, stdout: str, stderr: str, returncode: int
    ) -> dict[str, tuple[str, str]] | None:
        """Job id -> (the batch system's state, why it waits, if said) for each job listed;
        None when the command failed for another reason than jobs it no longer knows."""
        unknown = self.row.get("status_unknown")
        if returncode != 0 and not (unknown and unknown in stderr) and not stdout.strip():
            return None
        if self.row["status_format"] == "json":
            if not stdout.strip():
                return {}
            try:
                node: Any = json.loads(stdout)
            except ValueError:
                return None
            *path, key = self.row["status_json"]
            for part in path:
                node = (node or {}).get(part) or {}
            return {
                str(jid): (str(info.get(key, "")), str(info.get("comment", "")))
                for jid, info in node.items()
            }
        states = {}
        for line in stdout.splitlines():
            match = re.match(self.row["status_line"], line)
            if match:
                reason = match.groupdict().get("reason") or ""
                states[match.group("id")] = (match.group("state"), reason)
        return states

    def never_starts(self, reason: str) -> bool:
        """Whether a job waits for a reason that never passes (a limit it breaks)."""
        return bool(reason) and reason in (self.row.get("never_starts") or ())

    def category(self, state: str | None) -> State:
        """queued, running or ended (a state the table does not list is an end)."""
        if state in self.row["queued"]:
            return "queued"
        if state in self.row["running"]:
            return "running"
        return "ended"


def detect(
    which: Callable[[str], str | None] = shutil.which, env: Mapping[str, str] | None = None
) -> str | None:
    """The batch system whose commands are all on PATH (the first, in the table's order).

    One that names a variable of its own (``detect_env``: Flux's FLUX_URI, set inside a Flux
    instance) counts only where that is set, and before the others: Flux run inside a Slurm
    allocation is the one the jobs go to."""
    env = os.environ if env is None else env
    rows = [(n, r) for n, r in data()["batch_systems"].items() if r.get("commands")]
    rows.sort(key=lambda item: not item[1].get("detect_env"))
    for name, row in rows:
        if row.get("detect_env") and not env.get(row["detect_env"]):
            continue
        if all(which(c) for c in row["commands"]):
            return name
    return None
