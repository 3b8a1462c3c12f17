"""Run a plan: rank 0 brings up the scheduler and waits for every worker (``first_rank``);
other ranks join (``worker_rank``); what both do with their workers is ``rank``'s.

No fixed sleeps: every wait is on a condition (a pipe event, a child's exit, a file that
appears) with a deadline.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError, say
from ..guard import private_files
from ..planning.plan import Plan
from . import nanny_host
from .first_rank import FirstRank
from .worker_rank import WorkerRank


def run(plan: Plan, host: nanny_host.NannyHost | None = None) -> int:
    """Run this rank: ``host``, its nanny host if ``nanny_host.start`` already forked it."""
    for note in plan.notes:
        say(note)
    if not plan.runs_scheduler:
        return WorkerRank(plan, host).run()
    status = 1
    try:
        status = FirstRank(plan, host).run()
        return status
    except UsageError as error:
        status = error.exit_code
        raise
    finally:
        if plan.exit_status_file:
            write_exit_status(plan.exit_status_file, status)


def write_exit_status(path: str, status: int) -> None:
    """Rank 0's exit status, for a job script whose launcher does not report it (Open MPI
    with --enable-recovery exits 0 whatever its ranks' statuses)."""
    try:
        private_files.rewrite_own_file(Path(path), f"{status}\n".encode())
    except UsageError as error:
        say(f"not writing the exit status: {error}")
    except OSError as error:
        say(f"cannot write the exit status to {path}: {error.strerror}")
