"""Run a plan: rank 0 brings up the scheduler and waits for every worker; other ranks join.

No fixed sleeps: every wait is on a condition (a pipe event, a child's exit, a file that
appears) with a deadline.
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
from pathlib import Path

from . import children, nanny_host, private, roster, security
from .banner import ready_message
from .connection import SchedulerInfo, poll_delays, read_scheduler_file, write_scheduler_file
from .errors import StartupError, UsageError, say
from .links import private_stream
from .plan import SCHEDULER_FIX, Plan, ProcessSpec
from .supervisor import Child, Supervisor

SHUTDOWN_GRACE = 30.0
# Rank 0 waits this much longer for the other ranks than each waits for its own workers before
# killing them: a rank whose workers hang is then seen ending on its own (kill, exit 1) rather
# than told the cluster ended while it was about to (a race of two equal timers, seen in CI).
RANK_KILL_MARGIN = 10.0
EXIT_RANK_LOST = 5  # rank 0, with --abort-on-node-loss: a rank was lost while the cluster ran


def exit_status(wait_status: int) -> int:
    """A shell-style exit status (128+N for a signal) from an ``os.waitpid`` status."""
    return os.waitstatus_to_exitcode(wait_status) if wait_status >= 0 else 1


def _shell_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _scheduler(spec: ProcessSpec, events: int, settings: int, rank_ends: list[int]) -> int:
    """The scheduler's process: import Dask, then, given the cluster's TLS settings by the rank
    on ``settings``, run the scheduler (``processes.scheduler_main``).

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
    return processes.scheduler_main(spec, events)


def run(plan: Plan, host: nanny_host.NannyHost | None = None) -> int:
    """Run this rank: ``host``, its nanny host if ``nanny_host.start`` already forked it."""
    for note in plan.notes:
        say(note)
    if not plan.runs_scheduler:
        return WorkerRank(plan, host).run()
    status = 1
    try:
        status = FirstRank(plan, host).run()
        return status
    except UsageError as error:
        status = error.exit_code
        raise
    finally:
        if plan.exit_status_file:
            write_exit_status(plan.exit_status_file, status)


def write_exit_status(path: str, status: int) -> None:
    """Rank 0's exit status, for a job script whose launcher does not report it (Open MPI
    with --enable-recovery exits 0 whatever its ranks' statuses)."""
    try:
        private.rewrite_own_file(Path(path), f"{status}\n".encode())
    except UsageError as error:
        say(f"not writing the exit status: {error}")
    except OSError as error:
        say(f"cannot write the exit status to {path}: {error.strerror}")


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

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if not self.stopping:
            self.stopping = True
            self.kill_at = time.monotonic() + self.plan.leave_timeout
            self.sup.signal_all(sig)


class FirstRank(Rank):
    """Rank 0: scheduler, its own workers, readiness, COMMAND, and the shutdown of all."""

    def __init__(self, plan: Plan, host: nanny_host.NannyHost | None) -> None:
        super().__init__(plan, host)
        self.info: SchedulerInfo | None = None
        self.workers: dict[str, str] = {}  # address -> name
        self._buffer = b""
        self.command: subprocess.Popen[bytes] | None = None
        self.jupyter: subprocess.Popen[bytes] | None = None
        self.scheduler_spec = next(p for p in plan.processes if p.role == "scheduler")
        self.scheduler_status = 0  # its exit code once it ended (negative: killed by a signal)
        self.roster: roster.Roster | None = None
        self.lost_reported = 0  # how many of the roster's lost ranks were reported

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
        self.started: dict | None = None
        self.sup.watch(events_r, self._on_events)
        spec = self.scheduler_spec
        # Forked first: the scheduler imports Dask while this rank makes the certificates.
        rank_ends = [events_r, settings_w]
        if self._host_pipe is not None:
            rank_ends.append(self._host_pipe)
        pid = children.fork(_scheduler, spec, events_w, settings_r, rank_ends)
        self.sup.add(spec, pid)
        os.close(events_w)
        os.close(settings_r)
        try:
            tls = self.prepare_directory()
        except (OSError, UsageError) as error:
            os.close(settings_w)
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
            self.sup.poll(min(1.0, deadline - time.monotonic()))
            self._handle_exits()
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
        if self.roster and self.roster.left:
            return f"rank(s) {sorted(self.roster.left)[:20]} exited before the cluster was ready"
        return None

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
        if plan.rank.size > 1:
            host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
            self.roster = roster.Roster(host, self.sup.watch_ready, self.sup.unwatch)
        self.info = SchedulerInfo(
            address=address,
            dashboard_port=self.started["dashboard_port"],
            dashboard_token=self.started["dashboard_token"],
            host=socket.gethostname(),
            launch_id=plan.rank.launch_id,
            tls=tls,
            roster=self.roster.address if self.roster else None,
            token=self.roster.token if self.roster else None,
        )
        write_scheduler_file(plan.scheduler_file, self.info)
        os.environ.update(self.info.client_env())
        self.start_workers(self.info.address, tls)
        ready = lambda: len(self.workers) >= plan.total_workers  # noqa: E731
        if not self._wait(ready, plan.timeout, progress=True, startup=True):
            if self.sup.signals or self._scheduler_gone():
                return self._shutdown(128 + (self.sup.signals or [signal.SIGTERM])[0])
            return self._abort(self._startup_failure() or self._missing_message())
        jupyter_port = None
        if plan.jupyter:
            from .jupyter import start_jupyter

            self.jupyter, jupyter_url, jupyter_port = start_jupyter(plan, self.info)
            self.info = dataclasses.replace(self.info, jupyter_link=jupyter_url)
            write_scheduler_file(plan.scheduler_file, self.info)  # for `hpc-cluster links`
        say(ready_message(plan, self.info, jupyter_port, whole_links=private_stream()))
        if plan.command:
            parent = os.getpid()  # COMMAND gets SIGTERM if this rank is killed
            self.command = subprocess.Popen(
                plan.command,
                preexec_fn=lambda: children.die_with_parent(signal.SIGTERM, parent),
            )
        return self._until_done()

    def _report_dashboard_port(self, port: int | None) -> None:
        wanted = int(self.scheduler_spec.options["dashboard_address"].rpartition(":")[2])
        if port and wanted and port != wanted:
            say(f"dashboard port {wanted} is taken (another cluster on this node?): using {port}")

    def _missing_message(self) -> str:
        plan = self.plan
        seen = {n.split("-", 1)[0] for n in self.workers.values()}  # names: RANK or RANK-I
        missing_ranks = [r for r in range(plan.rank.size) if str(r) not in seen]
        ranks = ", ".join(map(str, missing_ranks[:20])) + (
            " ..." if len(missing_ranks) > 20 else ""
        )
        which = f"no worker from rank(s) {ranks}" if ranks else "every rank has some"
        return (
            f"only {len(self.workers)} of {plan.total_workers} workers connected within "
            f"{plan.timeout:g} s; {which}"
        )

    def _lost_ranks(self) -> list[int]:
        """Ranks lost (killed, or their node died) since the last call, each said once."""
        if self.roster is None or self.stopping:
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

    def _until_done(self) -> int:
        status = 0
        while True:
            self.sup.poll(1.0)
            self._handle_exits()
            if self._lost_ranks() and self.plan.abort_on_node_loss:
                if self.command and self.command.poll() is None:
                    self.command.terminate()
                    self._wait_command(SHUTDOWN_GRACE)
                return self._shutdown(EXIT_RANK_LOST)
            if self.sup.signals:
                sig = self.sup.signals[0]
                say(f"received signal {sig}: shutting down")
                if self.command and self.command.poll() is None:
                    self.command.send_signal(sig)
                    self._wait_command(SHUTDOWN_GRACE)
                return self._shutdown(128 + sig)
            if self.command is not None:
                code = self.command.poll()
                if code is not None:
                    status = _shell_code(code)
                    say(f"command exited with status {status}: shutting down")
                    return self._shutdown(status)
            if self._scheduler_gone():
                code = self.scheduler_status
                if code and not self.stopping:  # killed (OOM, a signal) or crashed
                    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
                    say(f"error: the scheduler died ({how}): shutting down")
                    status = _shell_code(code)
                else:
                    say("the scheduler was shut down")
                if self.command and self.command.poll() is None:
                    self.command.terminate()
                    self._wait_command(SHUTDOWN_GRACE)
                return self._shutdown(status)

    def _wait_command(self, timeout: float) -> None:
        assert self.command is not None
        try:
            self.command.wait(timeout)
        except subprocess.TimeoutExpired:
            self.command.kill()
            self.command.wait()

    def _abort(self, problem: str) -> int:
        say(f"error: {problem}")
        self._shutdown(0)
        return StartupError.exit_code

    def _shutdown(self, status: int) -> int:
        """Close every worker of every rank, see them go, then close the scheduler.

        Waiting for the workers first lets the other ranks end before this one: a launcher
        that kills the remaining ranks when one exits (srun --kill-on-bad-exit, Open MPI)
        then has nobody left to kill, and reports COMMAND's status.
        """
        self.stopping = True
        self.release_host()
        if self.workers and not self._scheduler_gone():
            self.sup.signal_all(signal.SIGUSR1, role="scheduler")
            self._wait(
                lambda: not self.workers,
                self.plan.leave_timeout,
                interruptible=False,
            )
        # A worker being restarted (its task killed it) is unknown to the scheduler, which
        # cannot close it: every rank stops its own. Without this its Nanny waited for the
        # scheduler until its death timeout, then logged a traceback (issue 19).
        if self.roster:
            self.roster.say_stop()
        for role in ("nannies", "worker"):
            self.sup.signal_all(signal.SIGTERM, role=role)
        # The other ranks end with their workers. Wait for them before this rank closes its
        # scheduler and nanny host: that work then separates their exits from this one's, so
        # the launcher has seen them go before it sees rank 0's status (seen in the suite on a
        # loaded machine: under srun --kill-on-bad-exit, rank 0 exiting right after the last
        # roll call closed found srun still counting that rank, which it killed: exit 143).
        deadline = time.monotonic() + self.plan.leave_timeout + RANK_KILL_MARGIN
        while self.roster and self.roster.alive and time.monotonic() < deadline:
            self.sup.poll(min(0.5, deadline - time.monotonic()))
            self._handle_exits()
        if self.roster and self.roster.alive:
            say(f"rank(s) {sorted(self.roster.alive)} still running after the shutdown")
            self.roster.say_ended()
        self.sup.signal_all(signal.SIGTERM, role="scheduler")
        if not self.sup.wait_all(SHUTDOWN_GRACE):
            say("some processes did not stop in time and were killed")
        return status

    def _cleanup(self) -> None:
        for proc in (self.jupyter, self.command):
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
        self.sup.close()
        shutil.rmtree(self.plan.cluster_dir, ignore_errors=True)
        if self.plan.scheduler_file.parent != self.plan.cluster_dir:
            self.plan.scheduler_file.unlink(missing_ok=True)


class WorkerRank(Rank):
    """Any other rank: wait for the scheduler file, start workers, run until told to stop."""

    rank0_lost = False
    workers_killed = False  # its workers outlasted the wait after SIGTERM
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

        ended = False  # rank 0 said it ends without waiting for this rank any longer

        def on_data() -> None:
            nonlocal ended
            try:
                data = conn.recv(256)
                if data:
                    ended = ended or roster.ENDED in data
                    if roster.STOP in data:  # the cluster ends
                        self.stop()
                    return
            except BlockingIOError:
                return
            except OSError:
                pass
            self.sup.unwatch(conn.fileno())
            if self.closed_by_scheduler:
                return
            if ended:  # also after its stop request: this rank's workers outlasted the wait
                say("error: rank 0 ended the cluster before this rank's workers had stopped")
            elif not self.stopping:
                say("error: rank 0 is gone (killed, or its node died): stopping this rank")
            else:
                return
            self.rank0_lost = True
            self.stop()

        self.sup.watch_ready(conn.fileno(), on_data)

    def _until_done(self, info: SchedulerInfo) -> int:
        while self.sup.children:
            self.sup.poll(1.0)
            if self.sup.signals and not self.stopping:
                self.stop()
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
