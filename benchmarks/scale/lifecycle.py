"""Start-up, an idle period, a computation and shutdown at scale: W workers against the real
rank 0, TLS on.

Rank 0 is the real ``start-cluster`` (scheduler, roll call, scheduler file, its own Nanny and
worker, COMMAND), told by an emulated Open MPI environment that it is rank 0 of N ranks. The
other N - 1 ranks are simulated, 250 to a process (``scale_sim.py``): the real scheduler-file
reader and roll call, start-cluster's own worker class, each rank on a loopback address of its
own (127.1.x.y), as real nodes have their own.

    PYTHONPATH=src python benchmarks/scale.py [--workers 1000 5000 10000 20000] [--per-rank 1]
        [--idle 300] [--tasks 100000] [--fan-in 10] [--saturation inf] [--no-settle] [--no-pin]
        [--repeat 1]

COMMAND (``scale_job.py``) waits until every simulated worker has sent its first heartbeat,
then leaves the cluster idle for ``--idle`` seconds, then computes ``--tasks`` tasks summed by
a tree of sums (no P2P), checking the result, while it times ``client.scheduler_info()`` and
the dashboard (``scale_job.py``); ``--no-settle``: COMMAND ends at once. Rank 0 runs on the
first CPU and the simulators on the others (``--no-pin``: all share all).

Per W it prints: the time from the last worker's start to "all connected", and to every
process gone after COMMAND; rank 0's CPU and memory; the scheduler's event loop (a preload,
``scheduler_probe.py``): its CPU per join and per removal, while idle and per task, its
stalls (longest per phase, and how many over 0.5 s), the heartbeats it handled per second,
the workers it removed before COMMAND's end and why; the computation; the user's probes; the
scheduler-file reads per second while the ranks wait; the open files at rank 0; the load
average. Then a fit of each against W and the goals of issue 28. A W whose scheduler would
need more open files than this shell's hard limit is not run: the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from scale_launch import REPO, SRC, Launch, Rank0Watch, dump, split_cpus
from scale_sim import RANKS_PER_SIM

JOB = Path(__file__).resolve().parent / "scale_job.py"
# Open files the scheduler's process holds per worker: its batched stream (start-cluster's
# workers send their heartbeats on it; with Dask's RPC heartbeats, 2 per worker).
SCHEDULER_FDS_PER_WORKER = 1
FDS_MARGIN = 256  # the scheduler's own files, the clients', the dashboard's (measured: ~40)
PHASES = ("start", "idle", "computation", "shutdown")


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
        "DASK_DISTRIBUTED__SCHEDULER__PRELOAD": str(REPO / "benchmarks" / "scheduler_probe.py"),
        "SCALE_PROBE_OUT": str(files["probe"]),
        "SCALE_FAULTS_OUT": str(files["faults"]),
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": opts.saturation,
    }
    command = [sys.executable, str(JOB), "--settled-dir", str(launch.settled),
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
    for t, late, thread_cpu, _ in faults["stalls"]:
        phase = phase_of(t, job, ready, end)
        if phase:
            longest[phase] = max(longest[phase], late)
            longest_cpu[phase] = max(longest_cpu[phase], thread_cpu)
    stacks: dict[str, Counter[str]] = {p: Counter() for p in PHASES}  # the loop while late
    for t, where in faults["stacks"]:
        if phase := phase_of(t, job, ready, end):
            stacks[phase][where] += 1
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
        # The scheduler's event loop alone, from scheduler_probe.py.
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
        "sim_cpu_s": sim_cpu,
        "busy": (cpu + sim_cpu) / (len(os.sched_getaffinity(0)) * (max(ends.values()) - start)),
        "peak_mib": watch.peak_rss / 2**20,
        "stats_per_s": reads / wait_window,
        "fds": watch.peak_fds,
        "progress_lines": sum(1 for _, x in lines if " connected" in x and "workers " in x),
        "load": os.getloadavg()[0],
    }


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """y = a + b * x**p, least squares: a and b for each p in 0, 0.05, ... 2, the best p kept."""
    best = (float("inf"), ys[0] if ys else 0.0, 0.0, 1.0)
    n = len(xs)
    for p in (i / 20 for i in range(41)):
        zs = [x**p for x in xs]
        mz, my = sum(zs) / n, sum(ys) / n
        var = sum((z - mz) ** 2 for z in zs)
        b = sum((z - mz) * (y - my) for z, y in zip(zs, ys, strict=True)) / var if var else 0.0
        a = my - b * mz
        err = sum((a + b * z - y) ** 2 for z, y in zip(zs, ys, strict=True))
        if err < best[0] - 1e-12:
            best = (err, a, b, p)
    return best[1], best[2], best[3]


def probe_cell(r: dict, phase: str, what: str) -> str:
    """A user's probe in a phase: median / longest seconds."""
    got = r["probes"].get(phase, {}).get(what)
    failed = r["probes"].get(phase, {}).get(f"{what} failed")
    text = f"{got[0]:.2f} / {got[1]:.2f}" if got else "–"
    return text + (f" ({failed[2]} failed)" if failed else "")


def gc_cell(gc: dict[str, list[float]]) -> str:
    young = [gc.get(g, [0] * 5) for g in ("0", "1")]
    full = gc.get("2", [0] * 5)
    return (f"{sum(y[0] for y in young):.0f}, {sum(y[3] for y in young):.2f}; "
            f"{full[0]:.0f}, {full[3]:.2f}, {full[4]:.2f}")  # fmt: skip


def number(fmt: str, value: object) -> str:
    return "–" if value is None else fmt.format(value)


COLUMNS = [
    ("last start -> all connected (s)", lambda r: number("{:.2f}", r["connect_s"])),
    ("launch -> all connected (s)", lambda r: number("{:.1f}", r["start_s"])),
    ("COMMAND exit -> all gone (s)", lambda r: number("{:.2f}", r["shutdown_s"])),
    ("  of which rank 0 after the last rank left (s)",
     lambda r: number("{:.2f}", r["rank0_shutdown_s"])),  # fmt: skip
    ("rank 0 CPU: until all connected, after COMMAND's exit, in all (s)",
     lambda r: f"{r['start_cpu_s']:.1f}, {r['shutdown_cpu_s']:.1f}, {r['cpu_s']:.1f}"),
    ("scheduler loop CPU per join (ms)", lambda r: number("{:.2f}", r["sched_join_ms"])),
    ("  heartbeats it handled meanwhile, per join", lambda r:
     f"{r['join_heartbeats'] / max(1, r['workers'] - 1):.2f}"),  # fmt: skip
    ("scheduler loop CPU per removal at the end (ms)",
     lambda r: number("{:.2f}", r["sched_leave_ms"])),  # fmt: skip
    ("scheduler loop CPU while idle (% of a core)",
     lambda r: number("{:.1f}", r["idle_loop_pct"])),  # fmt: skip
    ("heartbeats handled per second while idle",
     lambda r: number("{:.0f}", r["heartbeats_per_s"])),  # fmt: skip
    ("computation: tasks; submit -> result (s); right",
     lambda r: f"{r['graph_tasks']}; {number('{:.1f}', r['computation_s'])}; "
               + {True: "yes", False: f"NO {r['job_error']}", None: "–"}[r["result_ok"]]),
    ("scheduler loop CPU per task (ms)", lambda r: number("{:.2f}", r["task_loop_ms"])),
    ("workers removed before COMMAND's end (why)",
     lambda r: ", ".join(f"{n} {why}" for why, n in r["dropped"].items()) or "0"),
    ("workers at the end / after the start", lambda r: r["workers_kept"]),
    *((f"longest loop stall, {p}: wall; the loop's own CPU (s)",
       lambda r, p=p: f"{r['longest_stall_s'][p]:.2f}; {r['longest_stall_cpu_s'][p]:.2f}")
      for p in PHASES),
    ("loop stalls over 0.5 s (wall)", lambda r: str(r["stalls_over_half_s"])),
    ("scheduler GC, whole run: young passes, CPU s; full passes, CPU s, longest s",
     lambda r: gc_cell(r["gc"])),
    *((f"scheduler_info() while {p}: median / longest (s)",
       lambda r, p=p: probe_cell(r, p, "scheduler_info")) for p in ("idle", "computation")),
    ("dashboard /status opened while computing (s)",
     lambda r: probe_cell(r, "computation", "/status").split(" / ")[0]),
    ("dashboard /info/main/workers.html while computing: median / longest (s)",
     lambda r: probe_cell(r, "computation", "/info/main/workers.html")),
    ("simulated ranks' CPU (s); all CPU / (cores x wall)",
     lambda r: f"{r['sim_cpu_s']:.0f}; {r['busy']:.2f}"),
    ("rank 0 peak RSS (MiB)", lambda r: f"{r['peak_mib']:.0f}"),
    ("scheduler-file reads/s while the ranks wait", lambda r: f"{r['stats_per_s']:.0f}"),
    ("rank 0 open fds (rank + scheduler)", lambda r: str(r["fds"])),
    ("progress lines", lambda r: str(r["progress_lines"])),
    ("load avg (1 min) at the end", lambda r: f"{r['load']:.1f}"),
]  # fmt: skip
FITTED = [("connect_s", "last start -> all connected (s)"),
          ("shutdown_s", "COMMAND exit -> all gone (s)"),
          ("cpu_s", "rank 0 CPU (s)"),
          ("sched_join_ms", "scheduler loop CPU per join (ms)"),
          ("sched_leave_ms", "scheduler loop CPU per removal (ms)"),
          ("idle_loop_pct", "scheduler loop CPU while idle (% of a core)"),
          ("peak_mib", "rank 0 peak RSS (MiB)"),
          ("fds", "rank 0 open fds")]  # fmt: skip


def median_of(runs: list[dict]) -> dict:
    """Each number's median over ``runs`` of one size (other fields from the first run)."""
    merged = dict(runs[0], runs=len(runs))
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            middle = statistics.median(r[key] for r in runs)
            merged[key] = round(middle) if isinstance(value, int) else middle
    return merged


def goals(by_w: dict[int, dict]) -> list[tuple[str, str, str, bool]]:
    """Issue 28's goals that these sizes measure: (what, measured, target, met)."""
    out = []
    if 10000 in by_w:
        r = by_w[10000]
        out.append(("10,000 workers: last start -> all connected (s)", f"{r['connect_s']:.1f}",
                    "<= 30", r["connect_s"] <= 30))  # fmt: skip
        out.append(("10,000 workers: COMMAND exit -> all gone (s)", f"{r['shutdown_s']:.1f}",
                    "<= 10", r["shutdown_s"] <= 10))  # fmt: skip
        if 1000 in by_w:
            ratio = r["sched_join_ms"] / by_w[1000]["sched_join_ms"]
            out.append(("scheduler CPU per join, 10,000 vs 1,000", f"{ratio:.2f}x", "<= 1.3x",
                        ratio <= 1.3))  # fmt: skip
        if 20000 in by_w:
            ratio = by_w[20000]["connect_s"] / r["connect_s"]
            out.append(("20,000 vs 10,000: last start -> all connected", f"{ratio:.2f}x",
                        "<= 2.2x", ratio <= 2.2))  # fmt: skip
    for w, r in by_w.items():
        for p in ("start", "computation", "shutdown"):
            wall, own = r["longest_stall_s"][p], r["longest_stall_cpu_s"][p]
            out.append((f"{w:,} workers: longest loop stall, {p}: wall; own CPU (s)",
                        f"{wall:.2f}; {own:.2f}", "<= 1", wall <= 1))  # fmt: skip
        lost = sum(r["dropped"].values())
        out.append((f"{w:,} workers: workers lost before COMMAND's end", str(lost), "0",
                    lost == 0))  # fmt: skip
    return out


def report(results: list[dict]) -> None:
    skipped = [r for r in results if "not_run" in r]
    results = [r for r in results if "not_run" not in r]
    for r in skipped:
        print(f"\nW={r['workers']}: not run: {r['not_run']}")
    if not results:
        return
    first = results[0]
    print(f"\nScale, {os.cpu_count()} CPUs, TLS on, {first['workers'] // first['ranks']} "
          "worker(s) per rank (rank 0 real, the other ranks simulated)"
          + ("; rank 0 on a CPU of its own" if first["pinned"] else "")
          + f"; worker-saturation {first['saturation']}"
          + (f"; medians of {first['runs']} runs" if first["runs"] > 1 else ""))  # fmt: skip
    print("| W (= ranks x per rank) | " + " | ".join(f"{r['workers']:,}" for r in results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for label, show in COLUMNS:
        print(f"| {label} | " + " | ".join(show(r) for r in results) + " |")
    ws = [float(r["workers"]) for r in results]
    if len(ws) >= 3:
        print("\n| fit against W | model | at 10,000 | at 100,000 |\n|---|---|---|---|")
        for key, label in FITTED:
            a, b, p = fit(ws, [float(r[key] or 0) for r in results])
            at = [a + b * w**p for w in (1e4, 1e5)]
            print(f"| {label} | {a:.3g} + {b:.3g} W^{p:.2f} | {at[0]:.4g} | {at[1]:.4g} |")
    for r in results:
        for phase, top in r["stall_stacks"].items():
            print(f"\nW={r['workers']:,}, {phase}: where the scheduler's loop was while over "
                  "0.25 s late (samples every 50 ms; innermost first):")  # fmt: skip
            for where, n in top:
                print(f"    {n:5d}  {where[:240]}")
    met = goals({r["workers"]: r for r in results})
    if met:
        print("\n| goal (issue 28) | measured | target | met |\n|---|---|---|---|")
        for what, value, target, ok in met:
            print(f"| {what} | {value} | {target} | {'yes' if ok else 'NO'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1000, 5000, 10000, 20000])
    parser.add_argument("--per-rank", type=int, default=1, help="workers per simulated rank")
    parser.add_argument("--idle", type=float, default=300, help="seconds the cluster idles")
    parser.add_argument("--tasks", type=int, default=100_000, help="leaf tasks (0: none)")
    parser.add_argument("--fan-in", type=int, default=10, help="results per sum in the tree")
    parser.add_argument(
        "--saturation",
        default="inf",
        help="the scheduler's distributed.scheduler.worker-saturation (Dask's default: 1.1, "
        "queuing); inf: Dask places sibling leaves on one worker (co-assignment), so the sums "
        "find their inputs there: with queuing each leaf's result moved to another worker over a "
        "new TLS connection, ~10 ms of the simulators' one core each (1,000 workers, 100,000 "
        "tasks: not done after 36 min)",
    )
    parser.add_argument(
        "--no-settle",
        dest="settle",
        action="store_false",
        help="COMMAND does not wait for every worker's first heartbeat",
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="rank 0 and the simulated ranks share every CPU (by default rank "
        "0 has the first CPU to itself and the simulators the others)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (medians shown)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per size")
    parser.add_argument("--json", help="also write the results here")  # fmt: skip
    opts = parser.parse_args()
    sys.path.insert(0, str(SRC))
    tmp = Path(tempfile.mkdtemp(prefix="dask-hpc-scale-"))
    results = []
    try:
        for workers in opts.workers:
            runs = [run_one(workers, opts, tmp) for _ in range(opts.repeat)]
            for r in runs:
                if "not_run" in r:
                    print(f"  W={workers}: not run: {r['not_run']}", file=sys.stderr)
                    continue
                print(f"  measured W={workers}: connect {r['connect_s']:.2f} s, shutdown "
                      f"{r['shutdown_s']:.2f} s, cpu {r['cpu_s']:.1f} s, fds {r['fds']}, "
                      f"load {r['load']:.1f}", file=sys.stderr, flush=True)  # fmt: skip
            results.append(runs[0] if "not_run" in runs[0] else median_of(runs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if opts.json:
            Path(opts.json).write_text(json.dumps(results, indent=1))
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
