"""What every rank does, rank 0 or not: start its workers (through its nanny host, or forked
with ``--no-nanny``), see them end and note why, stop them on request."""

from __future__ import annotations

import os
import signal
import time

from ..errors import say
from ..guard import security
from ..planning.plan import Plan, ProcessSpec
from . import children, nanny_host
from .supervisor import Child, Supervisor

# s a rank's whole shutdown may take after a signal: a batch system that stops a job (scancel,
# the walltime) SIGTERMs every process, then SIGKILLs them after Slurm's KillWait (30 s by
# default), and the rank must be done by then, its directories removed (what did not stop in
# this time is killed). Before, rank 0's waits grew with W (62 s for the workers, 72 s for the
# ranks at 10,000): measured on 2 cores at load ~45 (benchmarks.scale.stop), rank 0 was
# gone 18.9 s after SIGTERM to every process and 26.3 s after SIGTERM to the ranks alone; 95 s
# once beside other load (the field report).
SIGNAL_BUDGET = 20.0


def exit_status(wait_status: int) -> int:
    """A shell-style exit status (128+N for a signal) from an ``os.waitpid`` status."""
    return os.waitstatus_to_exitcode(wait_status) if wait_status >= 0 else 1


def shell_code(code: int) -> int:
    return 128 - code if code < 0 else code


class Rank:
    """What every rank does: start its workers, see them end, stop them on request."""

    def __init__(self, plan: Plan, host: nanny_host.NannyHost | None) -> None:
        self.plan = plan
        self.sup = Supervisor()
        # The pipe to the nanny host (forked in cli.main), open until the host has the address.
        self._host_pipe = host.pipe if host is not None else None
        if host is not None:
            self.sup.add(host.spec, host.pid)
        self.stopping = False
        self.kill_at = float("inf")  # once stopping: when what did not stop is killed
        self.scheduler_lost = False
        self.closed_by_scheduler = False
        self.workers_failed = False

    def start_workers(self, address: str, tls: security.TlsFiles | None) -> None:
        """Send the nanny host the scheduler's address, or fork plain workers (--no-nanny)."""
        if self._host_pipe is not None:
            nanny_host.send_start(self._host_pipe, address, security.tls_env(tls) if tls else {})
            self.release_host()
            return
        from . import processes  # distributed: only a rank that runs Dask itself imports it

        for spec in self._worker_specs():
            self.sup.add(spec, children.fork(processes.worker_main, spec, address))

    def release_host(self) -> None:
        """Close the pipe to the nanny host: a host still waiting on it exits."""
        if self._host_pipe is not None:
            os.close(self._host_pipe)
            self._host_pipe = None

    def _worker_specs(self) -> list[ProcessSpec]:
        return [spec for spec in self.plan.processes if spec.role == "worker"]

    def handle_worker_exit(self, child: Child, status: int) -> None:
        """A nanny host or a ``--no-nanny`` worker ended: note why."""
        code = exit_status(status)
        what = f"worker {child.spec.name}" if child.spec.role == "worker" else child.spec.name
        if code == children.EXIT_CLOSED:
            if not self.stopping:
                self.closed_by_scheduler = True
        elif code == children.EXIT_SCHEDULER_LOST:
            self.scheduler_lost = True
        elif not self.stopping:
            if code == children.EXIT_FAILED:
                self.workers_failed = True
            elif code < 0:
                say(f"{what} was killed by signal {-code}: its workers are gone")
            else:
                say(f"{what} exited with status {code}")

    def stop(self, sig: int = signal.SIGTERM, within: float | None = None) -> None:
        """Signal this rank's workers (its nanny host); what has not ended after the shutdown
        wait (or ``within`` seconds, if shorter) is killed."""
        if not self.stopping:
            self.stopping = True
            wait = self.plan.leave_timeout
            self.kill_at = time.monotonic() + (wait if within is None else min(within, wait))
            self.sup.signal_all(sig)
