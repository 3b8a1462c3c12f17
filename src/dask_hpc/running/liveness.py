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
workers do, and its silence means the node's processes make no progress at all. What it says
is a few bytes on the connection it already holds to rank 0's process (not the scheduler's), so
the scheduler's event loop, the thing that grows busy with the cluster, takes no part.

How: rank 0 sends every rank a numbered tick every ``interval`` seconds (``timeout /
HUNG_TICKS``, longer with many ranks so rank 0 sends and reads at most ``TICKS_PER_SECOND``:
10,000 ranks, a tick each 10 s, never over a third of the timeout), and a rank's loop answers
each one it reads with its number. When it is time for the next tick, a rank that has answered
none of the ticks of the last ``timeout`` seconds is hung: it answered tick j, and the ticks of
the ``timeout`` seconds since went unanswered, so it hung 25 to 30 s before (timeout 30).
Counting ticks, not seconds, keeps rank 0's own stalls out of it (its node loaded: no ticks go
out meanwhile, and the ranks answer the next); ranks that hung together are found at the same
tick, and named in one line; a rank that its node's load keeps off the CPU for less than
``timeout - interval`` seconds answers in time (it answers the newest tick it reads).
"""

from __future__ import annotations

HUNG_TICKS = 6  # ticks per timeout (see tick_interval)
TICKS_PER_SECOND = 1000  # what rank 0's process sends (and reads) at most, all ranks together


def tick_interval(timeout: float, ranks: int) -> float:
    """Seconds between ticks: ``timeout / HUNG_TICKS``, longer with many ranks (rank 0 sends
    ``TICKS_PER_SECOND`` at most), never over a third of the timeout."""
    return min(timeout / 3, max(timeout / HUNG_TICKS, ranks / TICKS_PER_SECOND))


class Ticks:
    """Rank 0's ticks: their numbers, and the last one each rank answered."""

    def __init__(self, timeout: float, interval: float) -> None:
        self.timeout = timeout
        self.interval = interval
        # A hung rank leaves this many ticks in a row unanswered when the next is due: the
        # ticks of the last ``timeout`` seconds but the one that is due.
        self.misses = max(2, round(timeout / interval) - 1)
        self.number = 0  # the last tick sent
        self.answered: dict[int, int] = {}  # rank -> the last tick it answered
        self.next_at = 0.0  # time.monotonic() of the next tick

    def joined(self, rank: int) -> None:
        """``rank`` joined: as good as an answer to the last tick."""
        self.answered[rank] = self.number

    def answer(self, rank: int, number: int) -> None:
        """``rank`` answered tick ``number`` (a late answer to an older one changes nothing)."""
        if rank in self.answered:
            self.answered[rank] = max(self.answered[rank], min(number, self.number))

    def forget(self, rank: int) -> None:
        """``rank`` is gone (ended, lost, given up): its silence no longer counts."""
        self.answered.pop(rank, None)

    def tick(self, now: float) -> tuple[int, list[int]]:
        """The next tick is due (``now >= next_at``; call it right after reading what arrived):
        the ranks that answered none of the last ``misses`` ticks (forgotten: each is returned
        once), and the number of the tick to send now."""
        hung = [rank for rank, n in self.answered.items() if self.number - n >= self.misses]
        for rank in hung:
            del self.answered[rank]
        self.number += 1
        self.next_at = now + self.interval
        return self.number, hung
