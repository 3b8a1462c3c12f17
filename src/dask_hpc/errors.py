"""How start-cluster reports: the exceptions the command line turns into one line, and say()."""

from __future__ import annotations

import os
import sys


def say(message: str) -> None:
    """One line on stderr, in one write: the ranks of a launch share a stream, and with
    PYTHONUNBUFFERED print() writes the text and its newline apart, so two ranks' lines ran
    together (seen under MPICH: three ranks' errors came out as two lines). A stderr whose
    reader is gone (``| tee`` after Ctrl-C) is pointed at /dev/null, so that nothing (Python's
    own exit flush included) fails on it."""
    try:
        sys.stderr.write(f"start-cluster: {message}\n")
        sys.stderr.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)


def stdout_closed() -> int:
    """What a command does when its stdout's reader has gone (``--dry-run | head``): no
    traceback; stdout pointed at /dev/null so that Python's exit flush does not fail on it;
    the exit status of a process killed by SIGPIPE (128 + 13), as ``yes | head`` leaves."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


class UsageError(Exception):
    """Bad input or an unusable environment: printed as one line, exit status 2."""

    exit_code = 2

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


class StartupError(UsageError):
    """The cluster could not be brought up (timeouts, missing ranks): exit status 3."""

    exit_code = 3
