"""Any rank but 0: wait for the scheduler file, join the roll call, start this rank's workers,
run until rank 0 or the scheduler says the cluster ends (or rank 0 is lost, or rank 0 gave
this rank up as hung); meanwhile answer rank 0's ticks on the roll call: this rank is alive."""

from __future__ import annotations

import os
import signal
import time

from ..errors import StartupError, say
from ..guard import security
from ..guard.connection import SchedulerInfo, poll_delays, read_scheduler_file
from . import children, roster
from .rank import SIGNAL_BUDGET, Rank


class WorkerRank(Rank):
    """Any other rank: wait for the scheduler file, start workers, run until told to stop."""

    rank0_lost = False
    workers_killed = False  # its workers outlasted the wait after SIGTERM
    given_up = False  # rank 0 gave this rank up as hung (it ran again: it stops)
    roster_fd: int | None = None  # this rank's end of the roll call (see _join_roster)

    def wait_for_scheduler(self) -> SchedulerInfo | None:
        plan = self.plan
        launch = None if plan.join else plan.rank.launch_id
        deadline = time.monotonic() + plan.timeout
        delays = poll_delays(plan.poll_interval, plan.poll_max_interval)
        while True:
            info = read_scheduler_file(plan.scheduler_file, launch)
            if info is not None:
                return info
            if self.sup.signals or time.monotonic() >= deadline:
                return None
            self.sup.poll(min(next(delays), max(0.0, deadline - time.monotonic())))

    def run(self) -> int:
        plan = self.plan
        try:
            info = self.wait_for_scheduler()
            if info is None:
                if self.sup.signals:
                    return 128 + self.sup.signals[0]
                raise StartupError(
                    f"no scheduler file from this launch at {plan.scheduler_file} after "
                    f"{plan.timeout:g} s (rank 0 never started the scheduler)",
                    "check rank 0's output; raise --timeout if the file system is slow",
                )
            if info.tls:
                os.environ.update(security.tls_env(info.tls))
            if info.roster and info.token and not plan.join:
                self._join_roster(info)
            self.start_workers(info.address, info.tls)
            return self._until_done(info)
        finally:
            if self.roster_fd is not None:  # ending on its own: rank 0 must not report it lost
                try:
                    os.write(self.roster_fd, roster.BYE)
                except OSError:
                    pass
            if self.sup.children:
                self.sup.signal_all(signal.SIGKILL)
                self.sup.wait_all(10)
            self.sup.close()

    def _join_roster(self, info: SchedulerInfo) -> None:
        assert info.roster and info.token
        try:
            conn = roster.join(info.roster, info.token, self.plan.rank.rank, self.plan.timeout)
        except OSError as error:
            raise StartupError(
                f"cannot reach rank 0 at {info.roster}: {error}",
                "check that every node can reach rank 0's node (--interface)",
            ) from None
        # Closing the connection tells rank 0 this rank is gone, so only this process's exit
        # may close it: a copy of its fd that no Python object owns. (When the socket object
        # closed it, at the end of run(), rank 0 could exit with COMMAND's non-zero status
        # while this rank was still shutting down its interpreter, and `srun
        # --kill-on-bad-exit` then SIGTERMed it: exit 143, seen once in CI under load.)
        self.roster_fd = os.dup(conn.fileno())
        said = roster.FromRank0()
        fd = self.roster_fd

        def on_data() -> None:
            try:
                data = conn.recv(256)
                if data:
                    said.feed(data)
                    roster.answer(fd, said)  # a tick: this rank is alive
                    if said.given_up is not None and not self.given_up:
                        self._on_given_up(said.given_up)
                    if said.stop:  # the cluster ends
                        self.stop()
                    return
            except BlockingIOError:
                return
            except OSError:
                pass
            self.sup.unwatch(conn.fileno())
            if self.closed_by_scheduler or self.given_up:
                return
            if said.ended:  # also after its stop request: this rank's workers outlasted the wait
                say("error: rank 0 ended the cluster before this rank's workers had stopped")
            elif not self.stopping:
                say("error: rank 0 is gone (killed, or its node died): stopping this rank")
            else:
                return
            self.rank0_lost = True
            self.stop()

        self.sup.watch_ready(conn.fileno(), on_data)

    def _on_given_up(self, seconds: float) -> None:
        """Rank 0 heard nothing from this rank for ``seconds`` (it was stopped, or its node hung)
        and went on without it: its workers were removed and the scheduler refuses their names.
        It ran again: it stops what it started and ends, with status 0, as a retired rank does,
        so that a launcher that ends the job when a rank fails keeps it (rank 0 said why)."""
        self.given_up = True
        say(
            f"warning: rank 0 gave this rank up (no sign of life from it for {seconds:g} s: its "
            "node hung, or its processes were stopped): stopping its workers"
        )
        self.stop()

    def _until_done(self, info: SchedulerInfo) -> int:
        while self.sup.children:
            self.sup.poll(1.0)
            if self.sup.signals and not self.stopping:
                self.stop(within=SIGNAL_BUDGET)
            if time.monotonic() >= self.kill_at:
                # A nanny host that does not end (a Nanny stuck closing) would otherwise keep
                # this rank, and the launcher's whole job, running until the walltime.
                say(
                    f"error: this rank's workers did not stop within "
                    f"{self.plan.leave_timeout:g} s of SIGTERM: killed"
                )
                self.sup.signal_all(signal.SIGKILL)
                self.kill_at = float("inf")
                self.workers_killed = True
            while self.sup.exited:
                self.handle_worker_exit(*self.sup.exited.pop(0))
        if self.given_up:
            return 0
        if self.rank0_lost:
            return children.EXIT_SCHEDULER_LOST
        if self.workers_killed:
            return children.EXIT_FAILED
        if self.scheduler_lost and not self.stopping:
            say(
                f"error: lost the scheduler at {info.address} (rank 0 or its node died?): "
                "workers stopped"
            )
            return children.EXIT_SCHEDULER_LOST
        if self.sup.signals and not self.closed_by_scheduler:
            return 128 + self.sup.signals[0]
        return 0  # closed by the scheduler: a signal after that is the launcher tidying up
