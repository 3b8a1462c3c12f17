"""A Nanny whose worker closed gracefully, and whose own close is cut short by the rank's end
(scancel sends SIGTERM to every process at once), ends with no traceback in the job's output.

A loaded CI run (2026-11-30) showed it: both of test_podman_hpc.py's cancelled jobs printed
``distributed.nanny - ERROR`` and a ``CancelledError`` traceback from Dask's
``Nanny._on_worker_exit``. tests/jobs/nanny_close.py brings a real Scheduler and Nanny to that
state in a process of its own and cancels the close where the job's end cancelled it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

JOB = Path(__file__).resolve().parent / "jobs" / "nanny_close.py"


def test_a_graceful_close_cut_short_by_the_ranks_end_logs_no_traceback(
    run_cmd, tmp_path: Path
) -> None:
    """The cancelled close ends quietly: nothing raised, no ERROR from Dask's loggers, the
    worker's process gone."""
    result = run_cmd([sys.executable, str(JOB), str(tmp_path)], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("NANNYCLOSE "))
    seen = json.loads(line[len("NANNYCLOSE ") :])
    assert seen == {"outcome": "None", "worker_process": "None", "errors": []}, seen
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
