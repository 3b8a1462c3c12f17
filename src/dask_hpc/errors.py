"""The one exception type the command line turns into a one-line message."""

from __future__ import annotations


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
