"""Rank 0's view of the other ranks, over the roster's connections (``roster.py``).

Which ranks were lost while the cluster ran, and which hung (silent for ``hpc.hung-timeout``:
``liveness.py``) and were given up (each said once: a warning, or an error that stops the
cluster with ``--abort-on-node-loss``), which left, hung or sent no worker before the cluster
was ready, and, at shutdown, telling them to stop and waiting until they are gone, so that the
launcher has seen them end before rank 0 does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from ..errors import say
from ..planning.plan import Plan
from . import liveness, roster
from .supervisor import Supervisor

# Rank 0 waits this much longer for the other ranks than each waits for its own workers before
# killing them: a rank whose workers hang is then seen ending on its own (kill, exit 1) rather
# than told the cluster ended while it was about to (a race of two equal timers, seen in CI).
RANK_KILL_MARGIN = 10.0


class RollCall:
    """The other ranks of ``plan``'s launch, seen from rank 0 (none with one rank)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.roster: roster.Roster | None = None
        self.lost_reported = 0  # how many of the roster's lost ranks were reported
        self.ready = False  # the cluster is ready: a rank given up from now on is a warning

    def open(self, address: str, sup: Supervisor) -> None:
        """Listen for the other ranks on the scheduler's host (``address``: the scheduler's),
        their connections watched by this rank's loop (``sup``)."""
        if self.plan.rank.size > 1:
            host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
            timeout = self.plan.hung_timeout
            ticks = None
            if timeout:
                interval = liveness.tick_interval(timeout, self.plan.rank.size)
                ticks = liveness.Ticks(timeout, interval)
            self.roster = roster.Roster(host, sup.watch_ready, sup.unwatch, ticks)

    def left_early(self) -> str | None:
        """Why the cluster cannot become ready, if a rank already exited or hung."""
        if self.roster and self.roster.left:
            return f"rank(s) {sorted(self.roster.left)[:20]} exited before the cluster was ready"
        if self.roster and self.roster.given_up:
            return (
                f"rank(s) {sorted(self.roster.given_up)[:20]} hung (no sign of life for "
                f"{self.plan.hung_timeout:g} s) before the cluster was ready"
            )
        return None

    def newly_hung(self) -> list[int]:
        """When a tick is due (call it right after reading what arrived): the ranks that
        answered no tick for ``hpc.hung-timeout``, given up (told, their connections closed),
        said once, returned once; then the tick goes to the others."""
        ticks = self.roster.ticks if self.roster else None
        now = time.monotonic()
        if ticks is None or now < ticks.next_at:
            return []
        assert self.roster is not None
        number, hung = ticks.tick(now)
        hung = [rank for rank in hung if rank in self.roster.alive]
        if hung:
            self.roster.give_up(hung, ticks.timeout)
        self.roster.tick(number)
        if not hung:
            return []
        if not self.ready:  # the start fails, naming them (left_early)
            return hung
        where = roster.where_lost(hung, self.roster.hosts)
        its = "its" if len(hung) == 1 else "their"
        what = f"{where} hung (no sign of life for {ticks.timeout:g} s)"
        if self.plan.abort_on_node_loss:
            say(f"error: {what}: stopping the cluster")
        else:
            say(
                f"warning: {what}: the cluster goes on without {its} workers, "
                "Dask recomputes what they held"
            )
        return hung

    def next_check(self) -> float | None:
        """When this rank's loop must turn next for the roll call (``time.monotonic()``; None:
        never): the next tick, or the end of a connection's time to present the token (those
        whose time is over are closed now: ``Roster.sweep``)."""
        if self.roster is None:
            return None
        self.roster.sweep()
        ticks = self.roster.ticks
        due = (ticks.next_at if ticks else None, self.roster.next_deadline)
        return min((at for at in due if at is not None), default=None)

    def missing_message(self, workers: Mapping[str, str]) -> str:
        """Which ranks sent no worker of ``workers`` (address -> name), when time ran out."""
        plan = self.plan
        seen = {n.split("-", 1)[0] for n in workers.values()}  # names: RANK or RANK-I
        missing_ranks = [r for r in range(plan.rank.size) if str(r) not in seen]
        ranks = ", ".join(map(str, missing_ranks[:20])) + (
            " ..." if len(missing_ranks) > 20 else ""
        )
        which = f"no worker from rank(s) {ranks}" if ranks else "every rank has some"
        return (
            f"only {len(workers)} of {plan.total_workers} workers connected within "
            f"{plan.timeout:g} s; {which}"
        )

    def newly_lost(self) -> list[int]:
        """Ranks lost (killed, or their node died) since the last call, each said once."""
        if self.roster is None:
            return []
        lost = self.roster.lost[self.lost_reported :]
        if not lost:
            return lost
        self.lost_reported += len(lost)
        where = roster.where_lost(lost, self.roster.hosts)
        was, its, nodes = ("was", "its", "node") if len(lost) == 1 else ("were", "their", "nodes")
        what = f"{where} {was} lost (killed, or {its} {nodes} died)"
        if self.plan.abort_on_node_loss:
            say(f"error: {what}: stopping the cluster")
        else:
            say(
                f"warning: {what}: the cluster goes on without {its} workers, "
                "Dask recomputes what they held"
            )
        return lost

    def say_stop(self) -> None:
        """Tell every rank to stop its own workers (the scheduler may not know them all)."""
        if self.roster:
            self.roster.say_stop()

    def wait_until_gone(self, step: Callable[[float], None], by: float | None = None) -> None:
        """Wait for the other ranks to end (``step(timeout)``: the rank's loop, one turn; ``by``:
        a ``time.monotonic()`` to stop at, if sooner); say which are still running when the
        wait is over, and tell them rank 0 ends."""
        deadline = time.monotonic() + self.plan.leave_timeout + RANK_KILL_MARGIN
        deadline = deadline if by is None else min(deadline, by)
        while self.roster and self.roster.alive and time.monotonic() < deadline:
            step(min(0.5, deadline - time.monotonic()))
        if self.roster and self.roster.alive:
            alive = sorted(self.roster.alive)  # (10,000 ranks: a range, not 10,000 numbers)
            say(f"rank(s) {roster.ranges(alive)} still running after the shutdown")
            self.roster.say_ended()
