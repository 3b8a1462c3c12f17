"""What a job script must satisfy before it is written: the site's rules (a required account,
the walltime of the queue a job without one gets), names safe to write into its directives,
and a launcher its batch system runs. Each is one UsageError naming the fix, checked in
``script.render``: ``hpc-job``, ``hpc-cluster script/up`` and ``HPCCluster`` all pass there.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..planning.sites import Site
from .launch import data

# Project, queue and job names written into a directive line: letters, digits and _ . @ + -
# (a comma between several, as Slurm's --partition=a,b takes). A space, quote, newline or $
# would split the directive or end it as a shell line: refused, never quoted.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]*(,[A-Za-z0-9_][A-Za-z0-9_.@+-]*)*")


def check_name(option: str, value: str | None, example: str) -> None:
    """``value`` of ``--option`` is safe in a directive line, or a UsageError."""
    if value is not None and not SAFE_NAME.fullmatch(value):
        raise UsageError(
            f"--{option} {value!r} is not a name the batch script can carry (letters, digits "
            "and _ . @ + - only)",
            f"give it as the site spells it, e.g. --{option} {example}",
        )


def _given_in(directives: Sequence[str], fmt: str | None) -> bool:
    """Whether one of ``directives`` (the user's own header lines) already says what ``fmt``
    writes (``-A {}``: a ``-A proj`` line)."""
    if not fmt:
        return False
    head = fmt.split("{", 1)[0].strip()
    return bool(head) and any(d.strip().startswith(head) for d in directives)


def check_site_rules(
    site: Site,
    system: Mapping[str, Any],
    *,
    account: str | None,
    queue: str | None,
    walltime: int,
    directives: Sequence[str],
) -> None:
    """The site's own rules for a job of its own batch system (``batch.account``,
    ``batch.default_queue``), or a UsageError naming the option that meets them."""
    if site.account_required and not account and not _given_in(directives, system["account"]):
        raise UsageError(
            f"{site.name}'s batch system refuses a job that names no project to charge "
            f"({site.account_required})",
            "give --account PROJECT (HPCCluster: account=)",
        )
    default = site.default_queue
    queue_format = site.batch_queue or system["queue"]
    if default is None or queue or _given_in(directives, queue_format):
        return
    from .script import parse_walltime  # the one parser of walltimes

    limit = parse_walltime(default.walltime)
    if walltime > limit:
        raise UsageError(
            f"a {site.name} job without --queue gets the default QOS {default.name}, whose "
            f"limit {default.walltime} is under the walltime asked, {_hms(walltime)} "
            f"({default.source})",
            f"give --queue regular (HPCCluster: queue=), or --walltime {default.walltime} or less",
        )


def _hms(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def launcher_names() -> list[str]:
    """The launchers a user may name (``systems.yaml``'s ``launcher_systems``)."""
    return sorted(data()["launcher_systems"])


def check_launcher(launcher: str, batch_system: str) -> None:
    """``launcher`` is one a user may name, and ``batch_system`` runs it; else a UsageError."""
    runs = data()["launcher_systems"]
    if launcher not in runs:
        raise UsageError(
            f"unknown launcher {launcher!r}", f"use one of: {', '.join(launcher_names())}"
        )
    if batch_system not in runs[launcher]:
        under = [name for name in launcher_names() if batch_system in runs[name]]
        raise UsageError(
            f"launcher {launcher} does not run under {batch_system} (it runs under "
            f"{', '.join(runs[launcher])})",
            f"drop --launcher for the site's own, or use one of: {', '.join(under)}",
        )


def check_executable(name: str) -> None:
    """A COMMAND given as a path (``./job.py``) that is a file here but not executable: a
    UsageError naming ``chmod +x`` (the shell would say only "not found" or "Permission
    denied", on rank 0, once the job runs). A path not here may be the job's own: not checked."""
    path = Path(name)
    if "/" in name and path.is_file() and not os.access(path, os.X_OK):
        raise UsageError(
            f"command {name!r} is not executable",
            f"chmod +x {name}, or run it with its interpreter, e.g. -- python {name}",
        )


def retired_warning(site: Site) -> str | None:
    """One line for a job script of a retired machine's profile, else None."""
    if not site.retired:
        return None
    return (
        f"warning: {site.name} was retired ({site.retired}): no machine runs this script any "
        "more (the profile stays for its users); pick another --site"
    )


# Imports dask_hpc without the working directory on sys.path (import_path.BOOTSTRAP's first
# step: -P is Python 3.11's), so a planted dask_hpc/ in the submit directory never answers.
_IMPORT_CHECK = 'import sys; getattr(sys.flags, "safe_path", 0) or sys.path.pop(0); import dask_hpc'


def runnable_lines(python: str | None) -> list[str]:
    """The job's lines that check, once and before the launcher, that what every rank runs
    without an image is there: ``start-cluster`` on the job's PATH, or ``python`` (``--python``)
    importing dask_hpc. Without them each rank of a job whose environment was not activated
    exits 127 ("command not found"), or 1 with a traceback, the job's lines no help; with them,
    one line and exit 2. For ``script.render``, after ``clean_env`` (which may drop PATH and
    PYTHONPATH entries), for a job with no image."""
    if python is None:
        problem = "start-cluster is not on this job's PATH ($PATH)"
        fix = (
            "activate the Python environment with dask-hpc before submitting (sbatch and flux "
            "batch pass your shell's environment on; qsub needs -V), or give --python "
            "/path/to/env/bin/python"
        )
        test = "command -v start-cluster >/dev/null 2>&1"
    else:
        quoted = shlex.quote(python)
        said = re.sub(r'(["\\$`])', r"\\\1", python)  # inside the message's double quotes
        problem = f"--python {said} cannot import dask_hpc on this node"
        fix = "install dask-hpc into that Python, or give the one that has it"
        test = f"{quoted} -c {shlex.quote(_IMPORT_CHECK)} >/dev/null 2>&1"
    message = f"dask-hpc: {problem}; {fix}"
    return [
        "# What every rank runs is here (else each would fail alone: exit 127, not found)",
        f'{test} || {{ echo "{message}" >&2; exit 2; }}',
    ]
