"""Forking a rank's children, and the exit statuses they report back to it.

Nothing here imports Dask, so a rank can fork before it imports ``distributed``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

EXIT_CLOSED = 0  # closed by the scheduler, retired, or stopped by a signal: a clean end
EXIT_FAILED = 1  # could not start
EXIT_SCHEDULER_LOST = 4  # the scheduler went away without closing the worker

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int, parent: int) -> None:
    """Have Linux send ``sig`` to this process when ``parent`` (its rank) dies.

    Without it a rank killed with SIGKILL (OOM killer, a launcher's kill) leaves its scheduler
    or workers running, orphaned, until the job ends. Call it in the child, right after fork.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: best effort
        return
    if os.getppid() != parent:  # the rank died before prctl took effect
        os.kill(os.getpid(), sig)


def send_json(pipe: int, message: dict[str, Any]) -> None:
    """One JSON line to a forked child waiting in ``read_json`` (one already gone is ignored:
    the rank hears why from its exit status)."""
    try:
        os.write(pipe, (json.dumps(message) + "\n").encode())
    except BrokenPipeError:
        pass


def read_json(pipe: int) -> dict[str, Any] | None:
    """The parent's one JSON line on ``pipe`` (None: the pipe closed before it came)."""
    with os.fdopen(pipe, "rb") as f:
        line = f.readline()
    return json.loads(line) if line.endswith(b"\n") else None


def fork(target: Callable[..., int], *args: Any) -> int:
    """Run ``target(*args)`` in a forked child that dies with this process; return its pid."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = EXIT_FAILED
    try:
        die_with_parent(signal.SIGKILL, parent)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        code = target(*args)
    except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
