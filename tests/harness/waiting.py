"""Wait for conditions with timeouts and jittered polling (never a fixed sleep)."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not become true in time."""


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value and return it; raise on timeout.

    The interval grows (x1.5, capped at 0.5 s) with +-20% jitter.
    """
    deadline = time.monotonic() + timeout
    delay = interval
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(min(delay * random.uniform(0.8, 1.2), max(deadline - now, 0.001)))
        delay = min(delay * 1.5, 0.5)


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that were free on every address a moment ago
    (Slurm's daemons bind 0.0.0.0: a port free on 127.0.0.1 only, in use by a connection from
    the host's own address, is refused them; seen with 12,000 connections open)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("0.0.0.0", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
