"""Run a command and record the CPU seconds of its whole process tree (benchmarks/startup.py).

    python benchmarks/cpu_tree.py OUT_DIR LABEL -- COMMAND [ARGS...]

This process becomes a child subreaper (Linux), so that what its command's processes leave
running (a forkserver, a resource tracker) is reparented here and counted too; it waits for
every descendant, then writes ``OUT_DIR/<pid>.json``: the label, the launcher's rank
(OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID) and user+system CPU seconds. Its own CPU (a
Python start) is not counted. It exits with the command's status; signals are passed on.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def main() -> int:
    out, label, dashes, *argv = sys.argv[1:]
    assert dashes == "--" and argv, __doc__
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    proc = subprocess.Popen(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: proc.send_signal(s))
    status = None
    while True:  # the command, then whatever it left running
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            break
        if pid == proc.pid:
            status = os.waitstatus_to_exitcode(wait_status)
            proc.returncode = status  # reaped here, not by Popen
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rank = next(
        (
            os.environ[v]
            for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "FLUX_TASK_RANK", "SLURM_PROCID")
            if v in os.environ
        ),
        "",
    )
    record = {"label": label, "rank": rank, "cpu": usage.ru_utime + usage.ru_stime}
    Path(out, f"{os.getpid()}.json").write_text(json.dumps(record))
    return 1 if status is None else (128 - status if status < 0 else status)


if __name__ == "__main__":
    sys.exit(main())
