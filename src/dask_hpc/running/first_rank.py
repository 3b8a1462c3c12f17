"""Rank 0: it forks the scheduler, makes the cluster's directory and certificates, publishes
the scheduler file, starts its own workers, waits until every worker of every rank connected,
prints the ready block, runs COMMAND, and shuts everything down in order when COMMAND ends,
a signal comes, the scheduler goes, or (with ``--abort-on-node-loss``) a rank is lost.

What it knows of the other ranks (lost, hung, gone before ready, waited for at shutdown) is the
roll call's (``roll_call.py``). A rank given up as hung has its workers removed by the
scheduler, told over a pipe (``given_up.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import StartupError, UsageError, say
from ..guard import private, security
from ..guard.connection import SchedulerInfo, write_scheduler_file
from ..guard.links import private_stream
from ..planning.network import parse_dashboard
from ..planning.paths import SCHEDULER_FIX
from ..planning.plan import Plan, ProcessSpec
from . import children, flux_job, given_up, nanny_host, roster
from .banner import ready_message
from .rank import SIGNAL_BUDGET, Rank, exit_status, shell_code
from .roll_call import RollCall

if TYPE_CHECKING:  # imported when --jupyter starts it
    from .jupyter import JupyterLab

SHUTDOWN_GRACE = 30.0
EXIT_RANK_LOST = 5  # rank 0, with --abort-on-node-loss: a rank was lost while the cluster ran


def _scheduler(
    spec: ProcessSpec, events: int, settings: int, control: int, rank_ends: list[int]
) -> int:
    """The scheduler's process: import Dask, then, given the cluster's TLS settings by the rank
    on ``settings``, run the scheduler (``processes.scheduler_main``), which reads the rank's
    requests on ``control``.

    ``rank_ends``: the rank's ends of its pipes, inherited through the fork and closed here
    (an inherited write end would keep a pipe from ever reporting the rank's end of it).
    """
    for fd in rank_ends:
        os.close(fd)
    from . import processes  # distributed: imported here, not in the rank

    start = children.read_json(settings)
    if start is None:  # the rank could not make the cluster's directory
        return children.EXIT_CLOSED
    os.environ.update(start["env"])
    return processes.scheduler_main(spec, events, control)


class FirstRank(Rank):
    """Rank 0: scheduler, its own workers, readiness, COMMAND, and the shutdown of all."""

    def __init__(self, plan: Plan, host: nanny_host.NannyHost | None) -> None:
        super().__init__(plan, host)
        self.info: SchedulerInfo | None = None
        self.workers: dict[str, str] = {}  # address -> name
        self._buffer = b""
        self.command: subprocess.Popen[bytes] | None = None
        self.jupyter: JupyterLab | None = None
        self.scheduler_spec = next(p for p in plan.processes if p.role == "scheduler")
        self.scheduler_status = 0  # its exit code once it ended (negative: killed by a signal)
        self.roll_call = RollCall(plan)
        self.flux_request: subprocess.Popen[bytes] | None = None
        self.hung: list[int] = []  # ranks given up as hung, not yet acted on (_until_done)
        self._control = -1  # the pipe to the scheduler's process (run)

    @property
    def roster(self) -> roster.Roster | None:
        """The other ranks' connections (``roll_call``); None with one rank."""
        return self.roll_call.roster

    def _on_events(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            event = json.loads(line)
            if event["event"] == "started":
                self.started = event
            elif event["event"] == "add":
                self.workers[event["address"]] = event["name"]
            elif event["event"] == "remove":
                self.workers.pop(event["address"], None)

    def prepare_directory(self) -> security.TlsFiles | None:
        """The cluster's directory, ours alone (made now, or checked through its descriptor)."""
        directory = private.own_directory(
            self.plan.cluster_dir, "cluster directory", SCHEDULER_FIX
        )
        self.plan.scheduler_file.unlink(missing_ok=True)  # never let anyone read a stale one
        if not self.plan.tls:
            return None
        return security.create(directory, self.plan.rank.launch_id)

    def run(self) -> int:
        plan = self.plan
        events_r, events_w = os.pipe()
        settings_r, settings_w = os.pipe()
        control_r, self._control = os.pipe()
        self.started: dict | None = None
        self.sup.watch(events_r, self._on_events)
        spec = self.scheduler_spec
        # Forked first: the scheduler imports Dask while this rank makes the certificates.
        rank_ends = [events_r, settings_w, self._control]
        if self._host_pipe is not None:
            rank_ends.append(self._host_pipe)
        pid = children.fork(_scheduler, spec, events_w, settings_r, control_r, rank_ends)
        self.sup.add(spec, pid)
        os.close(events_w)
        os.close(settings_r)
        os.close(control_r)
        if plan.rank.launcher == "flux" and not plan.abort_on_node_loss:
            self.flux_request = flux_job.keep_on_node_loss(os.environ, plan.rank.node)
        try:
            tls = self.prepare_directory()
        except (OSError, UsageError) as error:
            os.close(settings_w)
            os.close(self._control)
            self._control = -1
            self.release_host()
            self.sup.signal_all(signal.SIGTERM)  # both still import Dask: no need to wait
            self.sup.wait_all(10)
            if isinstance(error, UsageError):
                raise
            raise UsageError(
                f"cannot prepare {plan.cluster_dir}: {error.strerror}", SCHEDULER_FIX
            ) from None
        env = security.tls_env(tls) if tls else {}
        os.environ.update(env)
        children.send_json(settings_w, {"env": env})
        os.close(settings_w)
        try:
            return self._serve(tls)
        finally:
            self._cleanup()

    def _wait(
        self,
        ready: Callable[[], bool],
        timeout: float,
        progress: bool = False,
        interruptible: bool = True,
        startup: bool = False,
    ) -> bool:
        deadline = time.monotonic() + timeout
        shown, shown_at = -1, 0.0
        while not ready():
            if (interruptible and self.sup.signals) or self._scheduler_gone():
                return False
            if startup and self._startup_failure():
                return False
            if time.monotonic() >= deadline:
                return False
            self._step(min(1.0, deadline - time.monotonic()))
            # A line a second at most (not one per worker: 100,000 lines at scale), and one
            # at every tenth of the cluster.
            count, now = len(self.workers), time.monotonic()
            total = self.plan.total_workers
            if progress and count and count != shown:  # "0/N connected" says nothing
                if now - shown_at >= 1.0 or count * 10 // total != max(shown, 0) * 10 // total:
                    shown, shown_at = count, now
                    say(f"workers {count}/{total} connected")
        if progress and shown != len(self.workers):
            say(f"workers {len(self.workers)}/{self.plan.total_workers} connected")
        return True

    def _scheduler_gone(self) -> bool:
        return not self.sup.pids("scheduler")

    def _startup_failure(self) -> str | None:
        """Why the cluster can no longer become ready, if it cannot."""
        if self.workers_failed:
            return "this rank's workers failed to start (see above)"
        return self.roll_call.left_early()

    def _step(self, timeout: float) -> None:
        """One turn of this rank's loop: wait up to ``timeout`` for an event (or until a rank may
        be found hung), note exits, give up the ranks found hung."""
        due = self.roll_call.next_check()
        if due is not None:
            timeout = min(timeout, max(0.0, due - time.monotonic()) + 0.01)
        self.sup.poll(timeout)
        self._handle_exits()
        if not self.stopping:
            hung = self.roll_call.newly_hung()
            if hung:
                self.hung.extend(hung)
                names = [name for rank in hung for name in self.plan.worker_names(rank)]
                given_up.tell_scheduler(self._control, names)

    def _handle_exits(self) -> None:
        while self.sup.exited:
            child, status = self.sup.exited.pop(0)
            if child.spec.role in ("worker", "nannies"):
                self.handle_worker_exit(child, status)
            elif child.spec.role == "scheduler":
                self.scheduler_status = exit_status(status)

    def _serve(self, tls: security.TlsFiles | None) -> int:
        plan = self.plan
        if not self._wait(lambda: self.started is not None, plan.timeout):
            return self._abort("the scheduler did not start")
        address = self.started["address"]
        self._report_dashboard_port(self.started["dashboard_port"])
        self.roll_call.open(address, self.sup)
        self.info = SchedulerInfo(
            address=address,
            dashboard_port=self.started["dashboard_port"],
            dashboard_token=self.started["dashboard_token"],
            dashboard_host=parse_dashboard(self.scheduler_spec.options["dashboard_address"])[0],
            host=socket.gethostname(),
            launch_id=plan.rank.launch_id,
            tls=tls,
            roster=self.roster.address if self.roster else None,
            token=self.roster.token if self.roster else None,
        )
        write_scheduler_file(plan.scheduler_file, self.info)
        # COMMAND's client waits as long as the cluster's own connections do (scaled with the
        # cluster's size: planning.scaling), not Dask's 30 s: at 10,000 workers a connection
        # opened while the scheduler's loop was busy timed out and the job lost its result
        # (issue 46)
        timeouts = "DASK_DISTRIBUTED__COMM__TIMEOUTS__"
        os.environ.update(
            {k: v for k, v in self.scheduler_spec.env.items() if k.startswith(timeouts)}
        )
        os.environ.update(self.info.client_env())
        self.start_workers(self.info.address, tls)
        ready = lambda: len(self.workers) >= plan.total_workers  # noqa: E731
        if not self._wait(ready, plan.timeout, progress=True, startup=True):
            if self.sup.signals:
                return self._shutdown(128 + self.sup.signals[0], within=SIGNAL_BUDGET)
            if self._scheduler_gone():
                return self._shutdown(128 + signal.SIGTERM)
            missing = self.roll_call.missing_message(self.workers)
            return self._abort(self._startup_failure() or missing)
        flux_job.finish(self.flux_request)  # sent at start: done long before this
        self.flux_request = None
        jupyter = None  # (the port of its link, its Unix socket) for the ready block
        if plan.jupyter:
            from .jupyter import start_jupyter

            self.jupyter = start_jupyter(plan, self.info)  # None: said why, nothing to link
            if self.jupyter is not None:
                jupyter = (self.jupyter.port, str(self.jupyter.socket))
                self.info = dataclasses.replace(self.info, jupyter_link=self.jupyter.url)
                write_scheduler_file(plan.scheduler_file, self.info)  # `hpc-cluster links`
        say(ready_message(plan, self.info, jupyter, whole_links=private_stream()))
        self.roll_call.ready = True
        if plan.command:
            parent = os.getpid()  # COMMAND gets SIGTERM if this rank is killed
            self.command = subprocess.Popen(
                plan.command,
                cwd=plan.user_directory,  # the user's program, where the user started it
                preexec_fn=lambda: children.die_with_parent(signal.SIGTERM, parent),
            )
        return self._until_done()

    def _report_dashboard_port(self, port: int | None) -> None:
        wanted = parse_dashboard(self.scheduler_spec.options["dashboard_address"])[1]
        if port and wanted and port != wanted:
            say(f"dashboard port {wanted} is taken (another cluster on this node?): using {port}")

    def _until_done(self) -> int:
        status = 0
        while True:
            self._step(1.0)
            lost = [] if self.stopping else self.roll_call.newly_lost()
            lost, self.hung = lost + self.hung, []
            if lost and self.plan.abort_on_node_loss:
                self._stop_command()
                return self._shutdown(EXIT_RANK_LOST)
            if self.sup.signals:
                sig = self.sup.signals[0]
                say(f"received signal {sig}: shutting down")
                return self._shutdown(128 + sig, within=SIGNAL_BUDGET, command_signal=sig)
            if self.command is not None:
                code = self.command.poll()
                if code is not None:
                    status = shell_code(code)
                    say(f"command exited with status {status}: shutting down")
                    return self._shutdown(status)
            if self._scheduler_gone():
                code = self.scheduler_status
                if code and not self.stopping:  # killed (OOM, a signal) or crashed
                    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
                    say(f"error: the scheduler died ({how}): shutting down")
                    status = shell_code(code)
                else:
                    say("the scheduler was shut down")
                self._stop_command()
                return self._shutdown(status)

    def _stop_command(self, sig: int = signal.SIGTERM, grace: float = SHUTDOWN_GRACE) -> None:
        """Pass ``sig`` to COMMAND if it still runs; kill it after ``grace`` seconds."""
        if self.command is None or self.command.poll() is not None:
            return
        self.command.send_signal(sig)
        try:
            self.command.wait(grace)
        except subprocess.TimeoutExpired:
            self.command.kill()
            self.command.wait()

    def _abort(self, problem: str) -> int:
        say(f"error: {problem}")
        self._shutdown(0)
        return StartupError.exit_code

    def _shutdown(
        self, status: int, within: float | None = None, command_signal: int | None = None
    ) -> int:
        """Close every worker of every rank, see them go, then close the scheduler.

        Waiting for the workers first lets the other ranks end before this one: a launcher
        that kills the remaining ranks when one exits (srun --kill-on-bad-exit, Open MPI)
        then has nobody left to kill, and reports COMMAND's status.

        ``within``: seconds for all of it (after a signal: ``SIGNAL_BUDGET``), each wait cut
        to what is left, and what has not stopped by then is killed. ``command_signal``: pass
        it to COMMAND first (the workers are told to close meanwhile).
        """
        deadline = time.monotonic() + within if within is not None else None

        def left(wait: float) -> float:
            return wait if deadline is None else max(0.0, min(wait, deadline - time.monotonic()))

        self.stopping = True
        self.release_host()
        closing = bool(self.workers) and not self._scheduler_gone()
        if closing:
            self.sup.signal_all(signal.SIGUSR1, role="scheduler")
        if command_signal is not None:
            self._stop_command(command_signal, left(SHUTDOWN_GRACE))
        if closing:
            self._wait(
                lambda: not self.workers,
                left(self.plan.leave_timeout),
                interruptible=False,
            )
        # A worker being restarted (its task killed it) is unknown to the scheduler, which
        # cannot close it: every rank stops its own. Without this its Nanny waited for the
        # scheduler until its death timeout, then logged a traceback (issue 19).
        self.roll_call.say_stop()
        for role in ("nannies", "worker"):
            self.sup.signal_all(signal.SIGTERM, role=role)
        # The other ranks end with their workers. Wait for them before this rank closes its
        # scheduler and nanny host: that work then separates their exits from this one's, so
        # the launcher has seen them go before it sees rank 0's status (seen in the suite on a
        # loaded machine: under srun --kill-on-bad-exit, rank 0 exiting right after the last
        # roll call closed found srun still counting that rank, which it killed: exit 143).
        self.roll_call.wait_until_gone(self._step, deadline)
        self.sup.signal_all(signal.SIGTERM, role="scheduler")
        if not self.sup.wait_all(left(SHUTDOWN_GRACE)):
            say("some processes did not stop in time and were killed")
        return status

    def _cleanup(self) -> None:
        if self.jupyter is not None:
            self.jupyter.stop()  # and its private runtime directory
        for proc in (self.command, self.flux_request):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.sup.children:
            self.sup.signal_all(signal.SIGKILL)
            self.sup.wait_all(10)
        if self.roster:
            self.roster.close()
        if self._control >= 0:
            os.close(self._control)
            self._control = -1
        self.sup.close()
        shutil.rmtree(self.plan.cluster_dir, ignore_errors=True)
        if self.plan.scheduler_file.parent != self.plan.cluster_dir:
            self.plan.scheduler_file.unlink(missing_ok=True)
