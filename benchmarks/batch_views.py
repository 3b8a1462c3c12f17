"""What benchmarks/elastic.py reads of a batch system, the same way for each: every job's state
(Slurm's squeue, Flux's flux jobs), which of those mean a job has started, which that it still
waits or runs, and which that its walltime ended it; and cancelling what is left."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class View:
    """One batch system of the test harness, as the benchmark reads it."""

    name: str
    system: Any  # tests/harness: SlurmCluster or FluxInstance
    states_argv: list[str]  # prints "ID STATE" per job, every job of every state
    started: frozenset[str]  # states of a job that has started
    live: frozenset[str]  # states of a job that waits or runs
    timed_out: str  # the state of a job its walltime ended

    def states(self) -> dict[str, str]:
        if self.name == "flux":
            out = self.system.command(self.states_argv, timeout=10).stdout
        else:
            out = self.system.run(self.states_argv, timeout=10).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if " " in line.strip())

    def live_jobs(self) -> list[str]:
        return [j for j, state in self.states().items() if state.strip() in self.live]

    def cancel_all(self) -> None:
        self.system.cancel_all()


def slurm_view(slurm: Any) -> View:
    return View(
        "slurm", slurm, ["squeue", "-h", "-t", "all", "-o", "%i %T"],
        frozenset({"RUNNING", "COMPLETING", "COMPLETED"}),
        frozenset({"PENDING", "RUNNING", "CONFIGURING"}), "TIMEOUT",
    )


def flux_view(flux: Any) -> View:
    # status: the state while a job is active, its result once it is inactive
    return View(
        "flux", flux, ["jobs", "-a", "--no-header", "--format={id.f58} {status}"],
        frozenset({"RUN", "CLEANUP", "COMPLETED"}),
        frozenset({"DEPEND", "PRIORITY", "SCHED", "RUN"}), "TIMEOUT",
    )


class JobStarts:
    """When each job was first seen started (its batch system read every 50 ms, in a thread)."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.first_running: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.05):
            states = self.view.states()
            now = time.monotonic()
            for job, state in states.items():
                if state.strip() in self.view.started:
                    self.first_running.setdefault(job, now)

    def last_start_since(self, t0: float) -> float | None:
        starts = [t for t in self.first_running.values() if t >= t0]
        return max(starts) if starts else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def killed(view: View, before: set[str]) -> dict[str, str]:
    """Of the jobs this run submitted: killed at their walltime / ended."""
    states = [s.strip() for j, s in view.states().items() if j not in before]
    ended = [s for s in states if s not in view.live]
    return {"wall_killed": f"{sum(1 for s in ended if s == view.timed_out)} / {len(ended)}"}
