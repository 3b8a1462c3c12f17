"""Faults at scale: a tenth of the ranks killed mid-computation, and ranks stuck at the roll call.

The cluster is the scale benchmark's (``launch``, ``sim``: imported, not copied):
rank 0 is the real ``start-cluster`` (scheduler, roll call, TLS, its own Nanny and worker,
COMMAND) told by an emulated Open MPI environment that it is rank 0 of N ranks; the other
ranks are simulated, up
to 250 per process, each with start-cluster's own worker class on a shared event loop. Here
the simulator processes are sized so that whole processes make up the fault: a lost node is
SIGKILL of the processes holding its ranks (their connections break, as the kernel closes
them), a stuck node is SIGSTOP of them. COMMAND is a Dask client (``faults_job``) that runs
many short tasks on every worker and checks each task's result.

    PYTHONPATH=src python -m benchmarks.scale.faults [--workers 1000] [--scenario all]
        [--kill-fraction 0.1] [--stuck-fraction 0.01] [--stall 10] [--hang-fraction 0.01]
        [--hung-timeout 30] [--tasks-per-worker 5] [--task-seconds 1] [--no-pin]

The scenarios, each a run of its own (``all``: kill, stuck, then hang; ``both``: kill, stuck):

- ``kill``: once every worker has sent its first heartbeat and a fifth of the computation's
  tasks are done, the processes holding 10% of the ranks (in blocks of at most 25 ranks, spread
  over the ranks) are SIGKILLed; the computation must finish with every task's result right,
  and the scheduler must remove exactly the lost workers.
- ``stuck``: 1% of the ranks (one process) are SIGSTOPped as they start, before they read the
  scheduler file or join the roll call, and SIGCONTed ``--stall`` seconds after every other
  worker has sent its first heartbeat; then the same computation, with no fault.
- ``hang``: as ``kill``, but SIGSTOP of 1% of the ranks, a node that hangs with its
  connections open; rank 0 gives such a rank up once it has been silent on the roll call for
  ``hpc.hung-timeout`` (``--hung-timeout``, 30 s by default; ``0``: the check off, and Dask
  removes its workers once they missed heartbeats for ``distributed.scheduler.worker-ttl``,
  start-cluster's at least 5 minutes, checked once per TTL). The stopped processes are
  continued once COMMAND has its result: the woken ranks must stop by themselves.

What is measured, at the scheduler, by a preload (``probe``, ``FaultWatch``): every worker
removal (when, which worker, why Dask removed it), the event loop's stalls (a callback due
every 10 ms notes how late it runs, and how much CPU the scheduler's thread and process used
meanwhile: a loop busy with its own work, or a process that got no CPU on a busy machine), and
Dask's own "Event loop was unresponsive in Scheduler" messages (``distributed.admin.tick``, its
limit set to 1 s here); where the loop was while late (its stack, sampled), the garbage
collector's passes, the connections it accepted, and the CPU of Dask's ``remove_worker``. On a
shared machine a stall's wall-clock length is mostly the machine (rank 0 waiting for a CPU);
the CPU its loop used in it is its own work (though events that piled up meanwhile make that
turn longer too). The table puts the goals of issue 19 next to the numbers, for the fault's
window and for the whole run: loss detected within 10 s, no loop stall over 1 s, zero healthy
workers dropped, the result right (``faults_report``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from .common import measure, note, parser, wait_for
from .faults_report import PHASES, report
from .launch import PROBE, Launch, dump, exited, module, split_cpus
from .sim import RANKS_PER_SIM

BLOCK = 25  # ranks per killed process: 100 lost ranks at 1,000 are 4 "nodes" of 25


def layout(size: int, special: int, role: str) -> list[tuple[int, int, str]]:
    """Simulator processes for ranks 1 to ``size - 1``: (first rank, count, role).

    ``special`` ranks make up processes of their own with ``role``, in blocks of at most
    ``BLOCK`` spread evenly over the ranks; the others are "healthy", up to 250 a process.
    """
    blocks = math.ceil(special / BLOCK) if special else 0
    counts = [special // blocks + (i < special % blocks) for i in range(blocks)] if blocks else []
    segments = max(1, blocks)
    bounds = [1 + (size - 1) * i // segments for i in range(segments + 1)]
    procs: list[tuple[int, int, str]] = []
    for i in range(segments):
        first, end = bounds[i], bounds[i + 1]
        if i < len(counts):
            procs.append((first, counts[i], role))
            first += counts[i]
        while first < end:
            count = min(RANKS_PER_SIM, end - first)
            procs.append((first, count, "healthy"))
            first += count
    return procs


def worker_names(first: int, count: int, per_rank: int) -> set[str]:
    """The names the simulated ranks give their workers (as ``sim.sim_rank`` does)."""
    ranks = range(first, first + count)
    if per_rank == 1:
        return {str(r) for r in ranks}
    return {f"{r}-{i}" for r in ranks for i in range(per_rank)}


class Fault(threading.Thread):
    """Does the scenario's fault while the cluster runs, noting when."""

    def __init__(self, scenario: str, launch: Launch, special: list[subprocess.Popen], go: Path,
                 job_out: Path, others: int, opts: argparse.Namespace,
                 timeout: float) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.scenario, self.launch, self.special = scenario, launch, special
        self.go, self.job_out, self.others, self.opts = go, job_out, others, opts
        self.timeout = timeout
        self.at: dict[str, float] = {}
        self.problem: str | None = None

    def ended(self) -> bool:
        return exited(self.launch.rank0)

    def run(self) -> None:
        timeout = self.timeout
        if self.scenario in ("kill", "hang"):
            if not wait_for(lambda: self.go.exists() or self.ended(), timeout):
                self.problem = "the computation never got going"
            if not self.go.exists():
                self.problem = self.problem or "COMMAND ended before the fault"
                return
            self.at["fault"] = time.time()
            for proc in self.special:
                # SIGKILL: every connection of these ranks breaks at once. SIGSTOP: they stay
                # open (the kernel still answers), the workers just stop: a hung node.
                os.kill(proc.pid, signal.SIGKILL if self.scenario == "kill" else signal.SIGSTOP)
            if self.scenario == "hang":  # until COMMAND is done (it waits for their removal)
                wait_for(lambda: self.job_out.exists() or self.ended(), timeout, 0.1)
                self.at["cont"] = time.time()
                for proc in self.special:
                    with contextlib.suppress(ProcessLookupError):  # reaped after a timeout
                        os.kill(proc.pid, signal.SIGCONT)
            return
        # stuck: the others have all sent a heartbeat (one file per simulator), then the stall
        settled = self.launch.settled
        if not wait_for(lambda: len(os.listdir(settled)) >= self.others or self.ended(), timeout):
            self.problem = "the other ranks never all connected"
        self.at["others_settled"] = time.time()
        threading.Event().wait(self.opts.stall)  # the fault itself: the ranks stay stopped
        self.at["cont"] = time.time()
        for proc in self.special:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)


def kind(line: str) -> str:
    """A log line without its time, addresses, numbers and details: what kind of line it is."""
    if line.startswith("start-cluster: "):  # start-cluster's own: whole
        line = line.removeprefix("start-cluster: ")
    else:  # a Dask log record: its message, up to its details
        line = line.split(" - ", 3)[-1] if " - " in line else line
        line = re.sub(r"'?tls://[\d.:]+'?", "ADDRESS", line)
        line = re.split(r": |\{", line, maxsplit=1)[0]
    return re.sub(r"\d+(\.\d+)?", "N", line)[:100]


def phase_of(t: float, marks: dict) -> str:
    """Which of ``PHASES`` the time ``t`` falls in."""
    fault = marks["fault"]
    if fault and fault[0] <= t <= fault[1]:
        return "fault"
    if t < marks["ready"]:
        return "start"
    if t >= marks["end"]:
        return "shutdown"
    return "heartbeats" if t < marks["submitted"] else "job"


def run_scenario(scenario: str, opts: argparse.Namespace, tmp: Path) -> dict:
    # Tasks of no length inline, as lifecycle's: each of Dask's thread pools polls its queue
    # every second, and 10,000 idle pool threads held the 2-core machine at load 3,500-4,100
    # (a kill at 10,000, 2026-11-29): the starved simulators went silent on the roll call.
    launch = Launch(opts.workers, opts.per_rank, tmp / scenario,
                    inline_tasks=opts.task_seconds == 0)  # fmt: skip
    size = launch.size
    fraction = {"kill": opts.kill_fraction, "stuck": opts.stuck_fraction,
                "hang": opts.hang_fraction}  # fmt: skip
    special = max(1, round(fraction[scenario] * size))
    if special > size - 2:
        raise SystemExit(f"--workers {opts.workers}: too few ranks for this fault")
    procs = layout(size, special, scenario)
    files = launch.tmp
    go, job_out, faults = files / "go", files / "job.json", files / "faults.json"
    for f in (go, job_out, faults):
        f.unlink(missing_ok=True)
    special_names: set[str] = set()
    for first, count, role in procs:
        if role == scenario:
            special_names |= worker_names(first, count, opts.per_rank)
    lost = len(special_names) if scenario in ("kill", "hang") else 0
    timeout = opts.timeout
    if scenario == "hang" and opts.hung_timeout:
        timeout += opts.hung_timeout + 60
    elif scenario == "hang":  # Dask checks every worker-ttl seconds: removed within 2 x ttl
        from dask_hpc.planning import scaling

        ttl = scaling.scale_needs(opts.workers, size, opts.per_rank, 1, {}).worker_ttl
        timeout += 2 * ttl + 60
    command = [
        *module("faults_job"),
        "--settled-dir", str(launch.settled),
        "--sims", str(len(procs)),
        "--tasks-per-worker", str(opts.tasks_per_worker),
        "--task-seconds", str(opts.task_seconds),
        "--go", str(go),
        "--lost", str(lost),
        "--out", str(job_out),
        "--timeout", str(timeout),
    ]  # fmt: skip
    probe_env = {
        "DASK_DISTRIBUTED__SCHEDULER__PRELOAD": str(PROBE),
        "SCALE_PROBE_OUT": str(files / "probe.json"),
        "SCALE_FAULTS_OUT": str(faults),
        "DASK_DISTRIBUTED__ADMIN__TICK__LIMIT": "1s",  # Dask's warning threshold: the goal
        "DASK_HPC__HUNG_TIMEOUT": f"{opts.hung_timeout:g}",
    }
    rank0_cpus, sim_cpus = split_cpus(opts.pin)
    load_start = os.getloadavg()[0]
    start = time.time()
    launch.start_rank0(command, probe_env, rank0_cpus)
    special_procs = []
    for first, count, role in procs:
        proc = launch.start_sim(first, count, sim_cpus)
        if role == scenario:
            special_procs.append(proc)
            if scenario == "stuck":
                os.kill(proc.pid, signal.SIGSTOP)  # before it has even imported Dask
    stopped = time.time()
    fault = Fault(
        scenario, launch, special_procs, go, job_out, len(procs) - len(special_procs), opts, timeout
    )
    fault.start()
    try:
        ends, _ = launch.reap(timeout)
    except RuntimeError as error:
        ready = launch.ready_at()
        got = f"all connected after {ready - start:.1f} s" if ready else "never all connected"
        done = ", ".join(f"{what} at {t - start:.1f} s" for what, t in fault.at.items())
        raise RuntimeError(f"{scenario}: {got}; {done or 'no fault yet'}: {error}") from None
    fault.join()
    launch.sim_stats(skip=special_procs if scenario == "kill" else ())
    ready = launch.ready_at()
    if ready is None:
        raise RuntimeError(f"{scenario}: the cluster never became ready:\n" + dump(launch.lines))
    if job_out.exists():
        job = json.loads(job_out.read_text())
    else:  # COMMAND wrote nothing: what rank 0 (and COMMAND, on its stderr) said last
        tail = " / ".join(line for _, line in launch.lines[-3:])
        job = {"error": f"no job output; rank 0's last lines: {tail}"[:400]}
    if not faults.exists():
        raise RuntimeError(f"{scenario}: the scheduler's probe wrote nothing:\n"
                           + dump(launch.lines))  # fmt: skip
    probe = json.loads(faults.read_text())
    # COMMAND's end as COMMAND itself timed it (just before it closes its client and exits):
    # removals from then on are the cluster's shutdown. Not the moment this process read rank
    # 0's "command exited" line: on a loaded machine that came seconds after the shutdown had
    # removed 11 of 18 healthy workers (a clean-clone run, 2026-12-01).
    command_exit = next((t for t, line in launch.lines if "command exited" in line), None)
    end = job.get("end") or command_exit or max(ends.values())
    kill = fault.at.get("fault")  # the moment of the SIGKILL (or the hang's SIGSTOP)
    before_end = [r for r in probe["removals"] if r[0] < end]
    gone = [(t, why) for t, name, why, _ in before_end if name in special_names]
    healthy_dropped = [name for _, name, _, _ in before_end if name not in special_names]
    cpu_at = [cpu for _, name, _, cpu in before_end if name in special_names]
    removal_ms = 1000 * (cpu_at[-1] - cpu_at[0]) / (len(cpu_at) - 1) if len(cpu_at) > 1 else None
    in_remove = [cpu for t, cpu in probe["removals_cpu"]
                 if kill is not None and kill <= t < end]  # fmt: skip
    whys: dict[str, int] = {}
    for _, why in gone:
        whys[why] = whys.get(why, 0) + 1
    fault_window = None
    if kill is not None:
        fault_window = (kill, max([t for t, _ in gone], default=kill) + 0.5)
    elif "cont" in fault.at:  # stuck
        fault_window = (fault.at["cont"], ready)
    marks = {"ready": ready, "end": end, "fault": fault_window,
             "submitted": job.get("started", end)}  # fmt: skip
    longest = {p: 0.0 for p in PHASES}
    stalls = []  # (seconds late, the loop thread's CPU in it, the process's, phase, when)
    for t, late, thread_cpu, process_cpu in probe["stalls"]:
        phase = phase_of(t, marks)
        longest[phase] = max(longest[phase], late)
        stalls.append((late, thread_cpu, process_cpu, phase, t - start))
    by_phase: dict[str, Counter[str]] = {p: Counter() for p in PHASES}
    for t, where in probe["stacks"]:
        by_phase[phase_of(t, marks)][where] += 1
    stacks = {p: [(n, where) for where, n in c.most_common(3)] for p, c in by_phase.items() if c}
    stacks = {p: (sum(by_phase[p].values()), top) for p, top in stacks.items()}
    worst = max(stalls, default=None)
    busiest = max(stalls, key=lambda s: s[1], default=None)  # most of the loop's own work
    busiest_by_phase = {p: 0.0 for p in PHASES}  # the most loop-thread CPU in a stall
    for _, thread_cpu, _, phase, _ in stalls:
        busiest_by_phase[phase] = max(busiest_by_phase[phase], thread_cpu)
    said_end = command_exit or end  # rank 0's lines are timed as this process read them
    said = [line for t, line in launch.lines if kill is not None and kill <= t < said_end]
    own = [line for line in said if line.startswith("start-cluster")]
    said = own + [line for line in said if not line.startswith("start-cluster")]
    progress = [line for t, line in launch.lines
                if scenario == "stuck" and stopped <= t < fault.at.get("cont", 0)]  # fmt: skip
    expected_after = opts.workers - lost
    return {
        "scenario": scenario,
        "workers": opts.workers,
        "ranks": size,
        "special": special,
        "special_procs": len(special_procs),
        "special_workers": len(special_names),
        "problem": fault.problem,
        "start_s": ready - start,
        "cont_to_ready_s": ready - fault.at["cont"] if scenario == "stuck" else None,
        "stalled_s": fault.at["cont"] - stopped if scenario == "stuck" else None,
        "first_removed_s": min(t for t, _ in gone) - kill if kill and gone else None,
        "all_removed_s": max(t for t, _ in gone) - kill if kill and gone else None,
        "removed": len(gone),
        "removal_ms": removal_ms,
        "in_remove_ms": 1000 * sum(in_remove) / len(in_remove) if in_remove else None,
        "in_remove_max_ms": 1000 * max(in_remove, default=0.0),
        "whys": whys,
        "healthy_dropped": len(healthy_dropped),
        "healthy_dropped_names": healthy_dropped[:10],
        "workers_after": job.get("workers_after"),
        "expected_after": expected_after,
        "tasks": job.get("tasks"),
        "result_ok": bool(job.get("result_ok")),
        "reconnects": job.get("reconnects"),
        "job_connect_timeout": job.get("connect_timeout"),
        "job_error": job.get("error"),
        "kill_to_done_s": job["done"] - kill if kill and "done" in job else None,
        "job_s": (job["done"] - job["started"]) if "done" in job else None,
        "longest_stall_s": probe["longest"],
        "longest_stall": worst,
        "busiest_stall": busiest,
        "stalls_over_1s": sum(1 for s in stalls if s[0] > 1),
        "stalls": sorted(stalls, reverse=True)[:20],
        "stall_stacks": stacks,
        "accepted": {
            p: sum(1 for t in probe["accepted"] if phase_of(t, marks) == p) for p in PHASES
        },  # fmt: skip
        "gc": probe["gc"],
        "stall_by_phase": longest,
        "busiest_by_phase": busiest_by_phase,
        "dask_ticks": len(probe["dask_ticks"]),
        "dask_longest_tick_s": max((s for _, s in probe["dask_ticks"]), default=0.0),
        "rank0_said": said[:5],
        "rank0_said_kinds": Counter(kind(line) for line in said).most_common(5),
        "rank0_said_lines": len(said),
        "rank0_own_lines": len(own),
        "progress_while_stuck": progress[-3:],
        "lines_while_stuck": len(progress),
        "stall": opts.stall,
        "hung_timeout": opts.hung_timeout,
        "woken_exit_s": max(ends[p.pid] for p in special_procs) - fault.at["cont"]
        if scenario == "hang" and "cont" in fault.at
        else None,
        "rank0_to_all_gone_s": max(ends.values()) - ends[launch.rank0.pid],  # the simulators
        "load_start": load_start,
        "load": os.getloadavg()[0],
    }


def scenarios(opts: argparse.Namespace, tmp: Path) -> Iterator[dict]:
    """Each scenario asked for, a run of its own."""
    names = {"both": ["kill", "stuck"], "all": ["kill", "stuck", "hang"]}.get(
        opts.scenario, [opts.scenario])  # fmt: skip
    for scenario in names:
        r = run_scenario(scenario, opts, tmp)
        note(
            f"measured {scenario} at W={opts.workers}: start {r['start_s']:.1f} s, "
            f"removed {r['removed']}, longest stall {r['longest_stall_s']:.2f} s, "
            f"result {'right' if r['result_ok'] else 'WRONG'}, load {r['load']:.1f}"
        )
        yield r


PROG = "benchmarks.scale.faults"


def main() -> int:
    p = parser(PROG, __doc__ or "", 1000, 600, "scenario")
    p.add_argument(
        "--scenario",
        choices=("kill", "stuck", "hang", "both", "all"),
        default="all",
        help="all: kill, stuck and hang (SIGSTOP of "
        "--hang-fraction of the ranks mid-computation); both: kill and stuck",
    )
    p.add_argument("--hung-timeout", type=float, default=30.0,
                   help="rank 0's hpc.hung-timeout (0: off, Dask's worker-ttl alone: "
                   "start-cluster's is at least 5 minutes)")  # fmt: skip
    p.add_argument("--kill-fraction", type=float, default=0.1, help="of the ranks")
    p.add_argument("--stuck-fraction", type=float, default=0.01, help="of the ranks")
    p.add_argument("--hang-fraction", type=float, default=0.01, help="of the ranks")
    p.add_argument("--stall", type=float, default=10.0,
                   help="seconds the stuck ranks stay stopped after every other worker "
                   "has sent its first heartbeat")  # fmt: skip
    p.add_argument("--tasks-per-worker", type=float, default=5,
                   help="tasks per worker (0.1 at 10,000 workers: each task runs in its "
                   "simulated worker's thread pool, and 10,000 threads at once on this "
                   "machine drove its load average past 2,000)")  # fmt: skip
    p.add_argument("--task-seconds", type=float, default=1.0, help="each task's sleep")
    opts = p.parse_args()
    if opts.workers % opts.per_rank or opts.workers // opts.per_rank < 4:
        p.error("--workers must be a multiple of --per-rank, with at least 4 ranks")
    return measure("dask-hpc-scale-faults-", opts.json, lambda tmp: scenarios(opts, tmp), report)


if __name__ == "__main__":
    sys.exit(main())
