"""Is a rank hung? Each rank's own process says it is alive on the roll call, and rank 0 gives
up a rank it has not heard from for ``hpc.hung-timeout`` seconds (30 by default).

Why the rank's process and not the workers: a node that hangs (a kernel soft lockup, a Lustre
or NFS hang, a wedged driver, a stopped process group) keeps its TCP connections open, since
the kernel still answers for them, so nothing breaks; only silence tells. Dask listens for a
worker's heartbeats, which its event loop sends: a task that holds the GIL for minutes (a C
call that keeps it) stops them as surely as a hang does, so Dask must wait long before it
gives a worker up (``distributed.scheduler.worker-ttl``, 5 minutes, checked once per TTL: a
hung worker goes after 5 to 10 minutes, measured 593 s at 200 workers), or it would drop busy
workers. A rank's own process (``start-cluster``) never runs user code: it waits in its
single-threaded loop for its children, signals and the roll call. So it answers whatever its
workers do, and its silence means the node's processes make no progress at all. Its beats are
a few bytes on the connection it already holds to rank 0's process (not the scheduler's), so
the scheduler's event loop, the thing that grows busy with the cluster, takes no part.

How often: a rank beats ``HUNG_BEATS`` times per timeout, so one that its node's load stalls
for up to ``timeout - interval`` seconds (25 s of 30) is still heard; with many ranks the
interval grows so rank 0 reads at most ``BEATS_PER_SECOND`` beats a second (10,000 ranks: one
beat each 10 s, up to a third of the timeout). Rank 0 checks right after it has read what
arrived, and after a stall of its own (its node loaded) gives every rank one more interval to
be heard before it counts their silence.
"""

from __future__ import annotations

import collections
import math

from . import config
from .errors import UsageError

SETTING = "hpc.hung-timeout"
ENV = "DASK_HPC__HUNG_TIMEOUT"
MIN_TIMEOUT = 5.0  # below it, a rank that a busy node keeps off the CPU for seconds is given up
HUNG_BEATS = 6  # beats per timeout, at least 3 (see beat_interval)
BEATS_PER_SECOND = 1000  # what rank 0's process reads at most, all ranks together


def hung_timeout(value: object = None) -> float | None:
    """``hpc.hung-timeout`` checked: seconds, or None when it is 0 (no check)."""
    value = config.get("hung-timeout") if value is None else value
    fix = f"set {SETTING} ({ENV}) to seconds, at least {MIN_TIMEOUT:g}, or 0 to turn it off"
    if value is False:
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{SETTING} {str(value)!r} is not a number", fix) from None
    if seconds == 0:
        return None
    if not math.isfinite(seconds) or seconds < MIN_TIMEOUT:
        raise UsageError(
            f"{SETTING} {str(value)!r} is below {MIN_TIMEOUT:g} s (a rank on a busy node "
            "would be given up)",
            fix,
        )
    return seconds


def beat_interval(timeout: float, ranks: int) -> float:
    """Seconds between a rank's beats: ``timeout / HUNG_BEATS``, longer with many ranks (rank
    0 reads ``BEATS_PER_SECOND`` at most), never over a third of the timeout."""
    return min(timeout / 3, max(timeout / HUNG_BEATS, ranks / BEATS_PER_SECOND))


class Silence:
    """Rank 0's account of when it last heard each rank; which are silent for ``timeout``.

    Ranks are kept in the order they were last heard (an ``OrderedDict``, moved to its end
    when heard), so each check looks only at the longest silent: O(1) per beat and per check,
    whatever the number of ranks.
    """

    def __init__(self, timeout: float, interval: float) -> None:
        self.timeout = timeout
        self.interval = interval
        self.heard_at: collections.OrderedDict[int, float] = collections.OrderedDict()
        self.last_check: float | None = None
        self.grace_until = 0.0

    def heard(self, rank: int, now: float) -> None:
        """``rank`` said something (a beat, anything) at ``now``."""
        self.heard_at[rank] = now
        self.heard_at.move_to_end(rank)

    def forget(self, rank: int) -> None:
        """``rank`` is gone (ended, lost, given up): its silence no longer counts."""
        self.heard_at.pop(rank, None)

    def hung(self, now: float) -> list[int]:
        """The ranks not heard from for ``timeout`` s by ``now`` (call it right after reading
        what arrived). They are forgotten: each is returned once."""
        if self.last_check is not None and now - self.last_check > self.interval:
            # Rank 0 itself did not run for a while (its node loaded): what the ranks sent
            # meanwhile has just been read; give those that send next one more interval.
            self.grace_until = now + self.interval
        self.last_check = now
        if now < self.grace_until:
            return []
        silent = []
        for rank, at in self.heard_at.items():
            if now - at < self.timeout:
                break
            silent.append(rank)
        for rank in silent:
            del self.heard_at[rank]
        return silent

    def next_due(self) -> float | None:
        """When the longest-silent rank will have been silent for ``timeout`` (None: none)."""
        for at in self.heard_at.values():
            return max(at + self.timeout, self.grace_until)
        return None
