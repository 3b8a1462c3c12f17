"""Start-up, an idle period, a computation and shutdown at scale: W workers against the real
rank 0, TLS on.

Rank 0 is the real ``start-cluster`` (scheduler, roll call, scheduler file, its own Nanny and
worker, COMMAND), told by an emulated Open MPI environment that it is rank 0 of N ranks. The
other N - 1 ranks are simulated, 250 to a process (``sim``): the real scheduler-file
reader and roll call, start-cluster's own worker class, each rank on a loopback address of its
own (127.1.x.y), as real nodes have their own.

    PYTHONPATH=src python -m benchmarks.scale [--workers 1000 5000 10000 20000] [--per-rank 1]
        [--idle 300] [--tasks 100000] [--fan-in 10] [--saturation inf] [--no-settle] [--no-pin]
        [--repeat 1]

COMMAND (``job``) waits until every simulated worker has sent its first heartbeat,
then leaves the cluster idle for ``--idle`` seconds, then computes ``--tasks`` tasks summed by
a tree of sums (no P2P), checking the result, while it times ``client.scheduler_info()`` and
the dashboard; ``--no-settle``: COMMAND ends at once. Rank 0 runs on the
first CPU and the simulators on the others (``--no-pin``: all share all).

Per W it prints: the time from the last worker's start to "all connected", and to every
process gone after COMMAND; rank 0's CPU and memory; the scheduler's event loop (a preload,
``probe``): its CPU per join and per removal, while idle and per task, its
stalls (longest per phase, and how many over 0.5 s), the heartbeats it handled per second,
the workers it removed before COMMAND's end and why; the computation; the user's probes; the
scheduler-file reads per second while the ranks wait; the open files at rank 0; the load
average. Then a fit of each against W and the goals of issue 28. A W whose scheduler would
need more open files than this shell's hard limit is not run: the table says so (tables:
``lifecycle_report``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from .common import measure, note, parser
from .launch import PROBE, Launch, Rank0Watch, dump, module, split_cpus
from .lifecycle_report import PHASES, report
from .sim import RANKS_PER_SIM

# Open files the scheduler's process holds per worker: its batched stream (start-cluster's
# workers send their heartbeats on it; with Dask's RPC heartbeats, 2 per worker).
SCHEDULER_FDS_PER_WORKER = 1
FDS_MARGIN = 256  # the scheduler's own files, the clients', the dashboard's (measured: ~40)


def files_needed(workers: int, ranks: int) -> int:
    """The most open files one of rank 0's processes needs: the scheduler's, or the rank's
    (a roll-call connection per rank)."""
    return max(SCHEDULER_FDS_PER_WORKER * workers, ranks) + FDS_MARGIN


def phase_of(t: float, job: dict, ready: float, end: float) -> str | None:
    if t < ready:
        return "start"
    if job.get("idle_start", end) <= t < job.get("idle_end", 0):
        return "idle"
    if job.get("submitted", end) <= t < job.get("done", job.get("submitted", 0)):
        return "computation"
    return "shutdown" if t >= end else None


def loop_cpu(samples: list[list[float]], start: float, end: float) -> float:
    """The scheduler loop's CPU seconds between two times (its samples, one a second)."""

    def at(when: float) -> float:
        return max((c for t, c in samples if t <= when), default=samples[0][1] if samples else 0)

    return at(end) - at(start)


def run_one(workers: int, opts: argparse.Namespace, tmp: Path) -> dict:
    launch = Launch(workers, opts.per_rank, tmp)
    size = launch.size
    needed, (_, hard) = files_needed(workers, size), resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and needed > hard:
        return {"workers": workers, "ranks": size, "not_run": f"needs ~{needed} open files in "
                f"one process, over the hard limit {hard} (ulimit -Hn)"}  # fmt: skip
    firsts = range(1, size, RANKS_PER_SIM)
    files = {n: tmp / f"{n}.json" for n in ("probe", "faults", "job")}
    for f in files.values():
        f.unlink(missing_ok=True)
    probe_env = {
        "DASK_DISTRIBUTED__SCHEDULER__PRELOAD": str(PROBE),
        "SCALE_PROBE_OUT": str(files["probe"]),
        "SCALE_FAULTS_OUT": str(files["faults"]),
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": opts.saturation,
    }
    command = [*module("job"), "--settled-dir", str(launch.settled),
               "--sims", str(len(firsts) if opts.settle else 0), "--idle", str(opts.idle),
               "--tasks", str(opts.tasks), "--fan-in", str(opts.fan_in),
               "--out", str(files["job"])]  # fmt: skip
    start = time.time()
    rank0_cpus, sim_cpus = split_cpus(opts.pin)
    rank0 = launch.start_rank0(command, probe_env, rank0_cpus)
    watch = Rank0Watch(rank0.pid)
    watch.start()
    for first in firsts:
        launch.start_sim(first, min(RANKS_PER_SIM, size - first), sim_cpus)
    sims, lines = launch.sims, launch.lines
    ends, usage = launch.reap(opts.timeout)
    watch.done.set()
    watch.join()
    sim_stats = launch.sim_stats()
    ready = launch.ready_at()
    if ready is None or not files["job"].exists():
        raise RuntimeError(f"W={workers}: the cluster never became ready:\n" + dump(lines))
    job = json.loads(files["job"].read_text())
    end = job["end"]  # COMMAND's exit: the shutdown starts
    last_start = max(s["last_start"] for s in sim_stats) if sim_stats else start
    reads = sum(s["reads"] for s in sim_stats)
    wait_window = max(1e-3, max((s["found"] for s in sim_stats), default=start) - start)
    cpu = watch.cpu[-1][1] if watch.cpu else 0.0  # COMMAND's left out (a child of rank 0)
    sim_cpu = sum(usage[p.pid].ru_utime + usage[p.pid].ru_stime for p, _ in sims)
    marks = json.loads(files["probe"].read_text())
    faults = json.loads(files["faults"].read_text())

    def scheduler_ms(first: str, last: str, per: int) -> float:  # its thread CPU per worker
        return 1000 * (marks[last][0] - marks[first][0]) / max(1, per) if last in marks else 0.0

    longest = {p: 0.0 for p in PHASES}
    longest_cpu = {p: 0.0 for p in PHASES}
    longest_window = {p: (0.0, 0.0) for p in PHASES}  # when the phase's longest stall was
    for t, late, thread_cpu, _ in faults["stalls"]:
        phase = phase_of(t, job, ready, end)
        if phase:
            if late > longest[phase]:
                longest_window[phase] = (t - late, t)
            longest[phase] = max(longest[phase], late)
            longest_cpu[phase] = max(longest_cpu[phase], thread_cpu)
    stacks: dict[str, Counter[str]] = {p: Counter() for p in PHASES}  # the loop while late
    # In the phase's longest stall: the samples each function is in (anywhere in the stack: a
    # turn of many distinct innermost frames, Dask's transitions, still adds up)
    in_longest: dict[str, Counter[str]] = {p: Counter() for p in PHASES}
    for t, where in faults["stacks"]:
        if phase := phase_of(t, job, ready, end):
            stacks[phase][where] += 1
            if longest_window[phase][0] <= t <= longest_window[phase][1]:
                in_longest[phase]["(samples)"] += 1
                in_longest[phase].update(set(where.split(" < ")))
    dropped: dict[str, int] = {}  # workers removed before COMMAND's end, by why
    for t, _, why, _ in faults["removals"]:
        if t < end:
            dropped[why] = dropped.get(why, 0) + 1
    idle = (job.get("idle_start", end), job.get("idle_end", end))
    idle_s = max(1e-3, idle[1] - idle[0])
    computed = (job.get("submitted", end), job.get("done", end))
    probes = job.get("probes", {})
    joined = (marks.get("first_join", [0, 0])[1], marks.get("last_join", [0, 0])[1])
    task_ms = (
        1000 * loop_cpu(marks["cpu"], *computed) / job["graph_tasks"] if "done" in job else None
    )
    kept = job.get("workers_after_computation", job.get("workers_after_idle"))
    if os.environ.get("SCALE_TRACE"):
        for t, line in lines:
            print(f"    {t - end:+8.2f} {line[:150]}", file=sys.stderr)
    return {
        "workers": workers,
        "ranks": size,
        "connect_s": ready - last_start,
        "start_s": ready - start,
        "settle": opts.settle,
        "saturation": opts.saturation,
        "pinned": rank0_cpus is not None,
        "shutdown_s": max(ends.values()) - end,
        # rank 0 exits after the last rank left: what is left of the shutdown is its own part
        "rank0_shutdown_s": ends[rank0.pid] - max([end, *(ends[p.pid] for p, _ in sims)]),
        "cpu_s": cpu,
        "start_cpu_s": watch.cpu_at(ready),
        "shutdown_cpu_s": cpu - watch.cpu_at(end),
        # The scheduler's event loop alone, from the probe.
        "sched_join_ms": scheduler_ms("first_join", "last_join", marks["joins"] - 1),
        "sched_leave_ms": scheduler_ms("first_leave", "last_leave", marks["leaves"] - 1),
        # heartbeats the scheduler handled meanwhile (part of "per join"; Dask's registration
        # counts as one, hence the joins taken off)
        "join_heartbeats": sum(joined[0] <= t <= joined[1] for t in marks["heartbeats"])
        - marks["joins"],
        "idle_loop_pct": 100 * loop_cpu(marks["cpu"], *idle) / idle_s,
        "heartbeats_per_s": sum(idle[0] <= t < idle[1] for t in marks["heartbeats"]) / idle_s,
        "computation_s": computed[1] - computed[0] if "done" in job else None,
        "task_loop_ms": task_ms,
        "result_ok": job.get("result_ok"),
        "job_error": job.get("error"),
        "graph_tasks": job.get("graph_tasks", 0),
        "dropped": dropped,
        "workers_kept": f"{kept}/{job.get('workers_settled')}",
        "longest_stall_s": longest,
        "longest_stall_cpu_s": longest_cpu,
        "stalls_over_half_s": sum(1 for _, late, _, _ in faults["stalls"] if late > 0.5),
        "probes": probes,
        # the scheduler's garbage collections, by generation: [passes, s, longest s, CPU s, ...]
        "gc": faults["gc"],
        # where the loop was while over 0.25 s late (sampled every 50 ms): the 3 most common
        "stall_stacks": {p: c.most_common(3) for p, c in stacks.items() if c},
        "longest_stall_functions": {p: c.most_common(12) for p, c in in_longest.items() if c},
        "sim_cpu_s": sim_cpu,
        "busy": (cpu + sim_cpu) / (len(os.sched_getaffinity(0)) * (max(ends.values()) - start)),
        "peak_mib": watch.peak_rss / 2**20,
        "stats_per_s": reads / wait_window,
        "fds": watch.peak_fds,
        "progress_lines": sum(1 for _, x in lines if " connected" in x and "workers " in x),
        "load": os.getloadavg()[0],
    }


def median_of(runs: list[dict]) -> dict:
    """Each number's median over ``runs`` of one size (other fields from the first run)."""
    merged = dict(runs[0], runs=len(runs))
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            middle = statistics.median(r[key] for r in runs)
            merged[key] = round(middle) if isinstance(value, int) else middle
    return merged


def sizes(opts: argparse.Namespace, tmp: Path) -> Iterator[dict]:
    """Each W's result: its runs' medians (or why it was not run)."""
    for workers in opts.workers:
        runs = [run_one(workers, opts, tmp) for _ in range(opts.repeat)]
        for r in runs:
            if "not_run" in r:
                note(f"W={workers}: not run: {r['not_run']}")
                continue
            note(f"measured W={workers}: connect {r['connect_s']:.2f} s, shutdown "
                 f"{r['shutdown_s']:.2f} s, cpu {r['cpu_s']:.1f} s, fds {r['fds']}, "
                 f"load {r['load']:.1f}")  # fmt: skip
        yield runs[0] if "not_run" in runs[0] else median_of(runs)


PROG = "benchmarks.scale"


def main() -> int:
    p = parser(PROG, __doc__ or "", [1000, 5000, 10000, 20000], 3600, "size")
    p.add_argument("--idle", type=float, default=300, help="seconds the cluster idles")
    p.add_argument("--tasks", type=int, default=100_000, help="leaf tasks (0: none)")
    p.add_argument("--fan-in", type=int, default=10, help="results per sum in the tree")
    p.add_argument(
        "--saturation",
        default="inf",
        help="the scheduler's distributed.scheduler.worker-saturation (Dask's default: 1.1, "
        "queuing); inf: Dask places sibling leaves on one worker (co-assignment), so the sums "
        "find their inputs there: with queuing each leaf's result moved to another worker over a "
        "new TLS connection, ~10 ms of the simulators' one core each (1,000 workers, 100,000 "
        "tasks: not done after 36 min)",
    )
    p.add_argument("--no-settle", dest="settle", action="store_false",
                   help="COMMAND does not wait for every worker's first heartbeat")  # fmt: skip
    p.add_argument("--repeat", type=int, default=1, help="runs per size (medians shown)")
    opts = p.parse_args()
    return measure("dask-hpc-scale-", opts.json, lambda tmp: sizes(opts, tmp), report)


if __name__ == "__main__":
    sys.exit(main())
