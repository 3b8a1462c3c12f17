"""The parts of a scale run that every scale benchmark (``lifecycle``, ``faults``, ``stop``)
shares: the real rank 0 (``start-cluster`` told by an emulated Open MPI environment that it is
rank 0 of N ranks), the processes of simulated ranks (``sim``), where each runs, and what rank 0
uses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from .sim import SIM_CONFIG, rank_env

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
# The scheduler's preload (Dask loads it by its path: it imports nothing of this package).
PROBE = Path(__file__).resolve().parent / "probe.py"


def module(name: str) -> list[str]:
    """The command line that runs this package's module ``name`` (``python -m``): the
    processes a run starts have the repository on their ``PYTHONPATH`` (``Launch.env``)."""
    return [sys.executable, "-m", f"{__package__}.{name}"]


class Rank0Watch(threading.Thread):
    """Samples rank 0's processes (RSS sum, fds of the rank and its scheduler, CPU), COMMAND's
    left out (a child of another program: the benchmark's client)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.peak_rss = 0
        self.peak_fds = 0
        self.cpu: list[tuple[float, float]] = []  # (time, CPU seconds of rank 0's processes)
        self.done = threading.Event()
        self.forked: dict[int, bool] = {}  # child pid -> forked by the rank (not COMMAND)
        self.cpu_of: dict[int, float] = {}  # pid -> its CPU seconds when last seen

    def _own(self) -> list:
        """The rank and what it forked (scheduler, nanny host, their children)."""
        procs = [self.root]
        for child in self.root.children():
            if child.pid not in self.forked:
                self.forked[child.pid] = child.cmdline() == self.root.cmdline()
            if self.forked[child.pid]:
                procs += [child, *child.children(recursive=True)]
        return procs

    def run(self) -> None:
        ps = self.psutil
        while not self.done.wait(0.25):
            try:
                procs = self._own()
            except ps.Error:
                return
            rss = fds = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                    self.cpu_of[p.pid] = sum(p.cpu_times()[:2])  # kept once the process ends
                    if p is self.root or p.ppid() == self.root.pid:  # rank, scheduler, host
                        fds += p.num_fds()
                except ps.Error:
                    continue
            self.cpu.append((time.time(), sum(self.cpu_of.values())))
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_fds = max(self.peak_fds, fds)

    def cpu_at(self, when: float) -> float:
        """Rank 0's CPU seconds by ``when`` (the last sample before it)."""
        return max((c for t, c in self.cpu if t <= when), default=0.0)


def split_cpus(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """Rank 0's CPU and the simulators' (the rest), or no pinning.

    Rank 0 on a CPU of its own, as on a real machine where the other ranks are other nodes.
    Sharing both CPUs with the simulators, its CPU time per worker grew with their number
    (caches and run queues shared with up to 8 busy processes): rank 0's CPU at 2,000 workers
    was 14.0-18.6 s over three runs sharing, 13.3-13.8 s pinned.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


def exited(proc: subprocess.Popen | None) -> bool:
    """Whether ``proc`` has exited, without reaping it (``Launch.reap`` does: a
    ``Popen.poll`` here took its status first, and ``reap``'s wait then failed)."""
    if proc is None:
        return False
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped meanwhile (by ``reap``): it has exited
        return True


def pinned_to(cpus: set[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that binds the child to ``cpus`` (None: no binding)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


@dataclasses.dataclass
class Launch:
    """One run's rank 0 and simulated ranks: their paths and environment, then their processes.

    ``faults`` starts, stops and kills them its own way with the same parts.
    """

    workers: int
    per_rank: int
    tmp: Path
    # Tasks on the simulators' event loops (lifecycle's take microseconds); False: in Dask's
    # thread pools (faults' sleep for a second each: inline, a simulator's 250
    # workers ran them one after another and the kill scenario never finished in 600 s).
    inline_tasks: bool = True
    size: int = 0
    job: str = ""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    scheduler_file: Path = Path()
    rank0: subprocess.Popen | None = None
    lines: list[tuple[float, str]] = dataclasses.field(default_factory=list)  # rank 0's stderr
    reader: threading.Thread | None = None
    sims: list[tuple[subprocess.Popen, Path]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.size = self.workers // self.per_rank
        self.job = f"scale{self.workers}x{random.randrange(10**6)}"
        for d in (self.sched_dir, self.local, self.settled):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        self.env = {
            **os.environ,
            # src, and the repository for this package's modules (``module``); the caller's
            # entries made absolute: start-cluster refuses a module imported through a relative
            # one (``PYTHONPATH=src``, as the docs' commands run it: guard.search_paths)
            "PYTHONPATH": os.pathsep.join(
                [str(SRC), str(REPO)]
                + [
                    os.path.abspath(p)
                    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                    if p
                ]
            ),
            "DASK_HPC__SCHEDULER_DIRECTORY": str(self.sched_dir),
            "PYTHONUNBUFFERED": "1",
        }
        from dask_hpc.planning import launchers

        info0 = launchers.detect(self.rank0_env(), None, pid=0, host="node0")
        self.scheduler_file = self.sched_dir / f"dask-hpc-{info0.launch_id}" / "scheduler.json"

    @property
    def sched_dir(self) -> Path:
        return self.tmp / "sched"

    @property
    def local(self) -> Path:
        return self.tmp / "local"

    @property
    def settled(self) -> Path:  # a file per simulator whose workers have all sent a heartbeat
        return self.tmp / "settled"

    def rank0_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**self.env, **rank_env(0, self.size, self.job), **(extra or {})}

    def start_rank0(
        self, command: list[str], extra_env: dict[str, str], cpus: set[int] | None
    ) -> subprocess.Popen:
        """The real start-cluster as rank 0 of ``size`` ranks, running ``command``; its stderr
        lines are collected in ``lines`` with the time each arrived."""
        argv0 = [
            sys.executable,
            "-m",
            "dask_hpc",
            "cpu",
            str(self.per_rank),
            "--nthreads",
            "1",
            "--memory-limit",
            "1GiB",
            "--interface",
            "lo",
            "--local-directory",
            str(self.local / "rank0"),
            "--",
            *command,
        ]
        self.rank0 = rank0 = subprocess.Popen(
            argv0,
            env=self.rank0_env(extra_env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=pinned_to(cpus),
        )

        def read_stderr() -> None:
            assert rank0.stderr is not None
            for raw in rank0.stderr:
                self.lines.append((time.time(), raw.decode(errors="replace").rstrip()))

        self.reader = threading.Thread(target=read_stderr, daemon=True)
        self.reader.start()
        return rank0

    def start_sim(self, first: int, count: int, cpus: set[int] | None) -> subprocess.Popen:
        """A process simulating ranks ``first`` to ``first + count - 1``."""
        from dask_hpc.planning import scaling

        # The simulated workers get the Dask timeouts that start-cluster derives for real ones.
        needs = scaling.scale_needs(
            self.workers, self.size, self.per_rank, len(os.sched_getaffinity(0)), {}
        )
        out = self.tmp / f"sim-{first}.json"
        out.unlink(missing_ok=True)
        argv = [
            *module("sim"),
            "--first", str(first),
            "--count", str(count),
            "--size", str(self.size),
            "--per-rank", str(self.per_rank),
            "--job", self.job,
            "--scheduler-file", str(self.scheduler_file),
            "--local", str(self.local),
            "--out", str(out),
            "--poll-interval", "0.1",
            "--poll-max-interval", str(scaling.poll_max_interval(self.size)),
            "--death-timeout", str(needs.start_timeout),
            "--settled-dir", str(self.settled),
            *([] if self.inline_tasks else ["--task-threads"]),
        ]  # fmt: skip
        with open(out.with_suffix(".err"), "wb") as err:  # a file: a full pipe would block it
            proc = subprocess.Popen(
                argv, env={**self.env, **SIM_CONFIG, **needs.env}, stderr=err,
                preexec_fn=pinned_to(cpus),
            )  # fmt: skip
        self.sims.append((proc, out))
        return proc

    def procs(self) -> list[subprocess.Popen]:
        return [p for p in [self.rank0, *(s for s, _ in self.sims)] if p is not None]

    def reap(
        self, timeout: float, statuses: dict[int, int] | None = None
    ) -> tuple[dict[int, float], dict[int, resource.struct_rusage]]:
        """Wait for every process (at most ``timeout`` s: then kill them all and raise); when
        each ended, and its resource usage (and in ``statuses``, its exit status)."""
        ends: dict[int, float] = {}
        usage: dict[int, resource.struct_rusage] = {}

        def reap(pid: int) -> None:
            _, status, ru = os.wait4(pid, 0)
            ends[pid] = time.time()
            usage[pid] = ru
            if statuses is not None:
                statuses[pid] = os.waitstatus_to_exitcode(status)

        procs = self.procs()
        reapers = [threading.Thread(target=reap, args=(p.pid,)) for p in procs]
        for t in reapers:
            t.start()
        deadline = time.monotonic() + timeout
        for t in reapers:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in reapers):
            for p in procs:
                if p.pid not in ends:
                    os.kill(p.pid, signal.SIGCONT)  # a stopped one too
                    p.kill()
            for t in reapers:
                t.join()
            errs = [out.with_suffix(".err").read_text(errors="replace")[-1500:]
                    for _, out in self.sims]  # fmt: skip
            raise RuntimeError(f"W={self.workers}: not done within {timeout:g} s:\n"
                               + dump(self.lines) + "\n".join(errs[:1]))  # fmt: skip
        if self.reader is not None:
            self.reader.join()
        for p in procs:
            p.returncode = 0  # reaped above
        return ends, usage

    def sim_stats(self, skip: Collection[subprocess.Popen] = ()) -> list[dict]:
        """What each simulator (but those in ``skip``: killed ones write nothing) wrote."""
        stats = []
        for proc, out in self.sims:
            if proc in skip:
                continue
            err = out.with_suffix(".err").read_text(errors="replace")
            if not out.exists():
                raise RuntimeError(f"a simulator wrote nothing:\n{err[-3000:]}")
            stats.append(json.loads(out.read_text()))
            if stats[-1]["errors"]:
                raise RuntimeError(f"simulated ranks failed: {stats[-1]['errors']}\n{err[-2000:]}")
        return stats

    def ready_at(self) -> float | None:
        """When rank 0 said that every worker is connected."""
        return next((t for t, line in self.lines if "Dask cluster ready" in line), None)


def dump(lines: list[tuple[float, str]]) -> str:
    return "\n".join(line for _, line in lines[-40:])
