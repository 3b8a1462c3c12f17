"""Start and stop at scale: W workers connected, then stopped as a job ends (COMMAND exits) or as
a batch system stops it (SIGTERM to every process of every rank: ``scancel``, the walltime).

The cluster is the scale benchmark's (``launch``, ``sim``): the real rank 0
(``start-cluster``, TLS, its own Nanny and worker) told by an emulated Open MPI environment
that it is rank 0 of W ranks, on a CPU of its own, and the other ranks simulated, 250 to a
process, on the other. COMMAND (``_job`` below) waits until every simulated worker has sent
its first heartbeat, then either exits (``--stop command``) or waits to be stopped:
``--stop sigterm`` sends SIGTERM to rank 0's process, everything it started (scheduler, nanny
host, worker, COMMAND) and every simulator, at once, as Slurm's ``scancel`` and walltime signal
every process of a job's steps; ``--stop sigterm-ranks`` only to the ranks' own processes
(rank 0's and the simulators), as ``mpiexec`` forwards a signal it gets to the ranks it
started. A simulator closes its workers on SIGTERM, as a rank does.

    PYTHONPATH=src python -m benchmarks.scale.stop [--workers 1000 10000] [--stop both]

Measured: launch -> all connected, the last simulated start -> all connected (the issue-28
measure), the stop -> rank 0's exit and -> every process gone, the floor under it (W workers
removed from a scheduler's state alone, by a plain Dask scheduler and by start-cluster's:
``benchmarks/removals.py``, once the stop is over), rank 0's status, what rank 0
printed after the stop, and what rank 0 left in its directories (its private local directory,
the cluster's directory, the forkserver's socket directory in its TMPDIR). Goals (issue 36):
all connected within 30 s of the last start and gone within 10 s of COMMAND's exit; stopped by
SIGTERM, rank 0 gone within Slurm's default KillWait (30 s), its directories removed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from .. import removals
from .common import Row, goals_table, measure, note, parser, table, wait_for
from .launch import Launch, dump, exited, module, split_cpus
from .sim import RANKS_PER_SIM

KILL_WAIT = 30.0  # Slurm's default KillWait: SIGKILL that long after the SIGTERM


def job_main(settled: str, sims: int, ready: str, stop: str, timeout: float) -> int:
    """COMMAND: every simulated worker has sent a heartbeat; say so; exit, or wait for SIGTERM."""
    if not wait_for(lambda: len(os.listdir(settled)) >= sims, timeout, 0.2):
        return 1
    Path(ready).write_text(str(time.time()))
    if stop != "command":
        signal.sigwait({signal.SIGTERM})  # (the default action would do; this says it)
    return 0


def leftovers(launch: Launch, tmpdir: Path) -> list[str]:
    """What rank 0 left: its private local directory, the cluster directory, socket dirs."""
    places = [launch.local / "rank0", launch.sched_dir, tmpdir]
    return sorted(str(p.relative_to(launch.tmp)) for d in places if d.exists()
                  for p in d.iterdir())  # fmt: skip


def run_one(workers: int, stop: str, opts: argparse.Namespace, tmp: Path) -> dict:
    launch = Launch(workers, opts.per_rank, tmp / f"{stop}-{workers}", inline_tasks=True)
    size = launch.size
    firsts = range(1, size, RANKS_PER_SIM)
    ready_file = launch.tmp / "ready"
    tmpdir = launch.tmp / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    (launch.local / "rank0").mkdir(exist_ok=True)
    command = [*module("stop"), "_job", str(launch.settled), str(len(firsts)),
               str(ready_file), stop, str(opts.timeout)]  # fmt: skip
    rank0_cpus, sim_cpus = split_cpus(opts.pin)
    start = time.time()
    rank0 = launch.start_rank0(command, {"TMPDIR": str(tmpdir)}, rank0_cpus)
    for first in firsts:
        launch.start_sim(first, min(RANKS_PER_SIM, size - first), sim_cpus)
    stopped_at = None
    wait_for(lambda: ready_file.exists() or exited(rank0), opts.timeout, 0.05)
    if not ready_file.exists():
        for proc, _ in launch.sims:
            proc.kill()
        launch.reap(60)
        raise RuntimeError(f"W={workers}: never settled:\n{dump(launch.lines)}")
    if stop.startswith("sigterm"):
        targets = [psutil.Process(rank0.pid)]
        if stop == "sigterm":
            targets += psutil.Process(rank0.pid).children(True)
        targets += [psutil.Process(p.pid) for p, _ in launch.sims]
        stopped_at = time.time()
        for proc in targets:
            try:
                proc.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
    statuses: dict[int, int] = {}
    ends, _ = launch.reap(opts.timeout, statuses)
    sim_stats = launch.sim_stats()
    ready = launch.ready_at()
    if ready is None:
        raise RuntimeError(f"W={workers}: the cluster never became ready:\n{dump(launch.lines)}")
    last_start = max(s["last_start"] for s in sim_stats) if sim_stats else start
    command_exit = next((t for t, line in launch.lines if "command exited" in line), None)
    stop_at = stopped_at or command_exit or max(ends.values())
    said = [line for t, line in launch.lines if t >= stop_at]
    # The floor under the stop, in the same run once it is over: W workers removed from a
    # scheduler's state alone, by Dask's own scheduler and by start-cluster's.
    floor_dask_s, _, _ = asyncio.run(removals.remove(workers, 0.1, False, "end"))
    floor_ours_s, _, _ = asyncio.run(removals.remove(workers, 0.1, True, "end"))
    return {
        "floor_dask_s": floor_dask_s,
        "floor_ours_s": floor_ours_s,
        "workers": workers,
        "stop": stop,
        "start_s": ready - start,
        "connect_s": ready - last_start,
        "rank0_exit_s": ends[rank0.pid] - stop_at,
        "all_gone_s": max(ends.values()) - stop_at,
        "rank0_status": statuses.get(rank0.pid),
        "lines": said[:6],
        "line_count": len(said),
        "left": leftovers(launch, tmpdir),
        "load": os.getloadavg()[0],
    }


def goals(results: list[dict]) -> Iterator[tuple[tuple[str, ...], bool]]:
    """Issue 36's goals, per run: its cells (what, run, measured, target) and whether met."""
    for r in results:
        run = f"W={r['workers']:,} {r['stop']}"
        timed = [("last start -> all connected (s)", r["connect_s"], 30)]
        if r["stop"] == "command":
            timed.append(("COMMAND's exit -> every process gone (s)", r["all_gone_s"], 10))
        else:
            timed.append(("SIGTERM -> rank 0 gone (s), within KillWait", r["rank0_exit_s"],
                          KILL_WAIT))  # fmt: skip
        for what, value, target in timed:
            yield (what, run, f"{value:.1f}", f"<= {target:g}"), value <= target
        yield ("nothing left in rank 0's directories", run, f"{len(r['left'])} left",
               "0"), not r["left"]  # fmt: skip


def report(results: list[dict]) -> None:
    """The runs' table, the goals, and what rank 0 said after each stop."""
    print(f"\nStart and stop at scale, {os.cpu_count()} CPUs, TLS on (rank 0 real on one CPU, "
          "the other ranks simulated on the other)\n")  # fmt: skip
    how = {"command": "COMMAND exits", "sigterm": "SIGTERM to every process",
           "sigterm-ranks": "SIGTERM to every rank's own process"}  # fmt: skip
    heads = [f"W={r['workers']:,}, {how[r['stop']]}" for r in results]
    rows: list[Row] = [
        ("launch -> all connected (s)", lambda r: f"{r['start_s']:.1f}"),
        ("last start -> all connected (s)", lambda r: f"{r['connect_s']:.1f}"),
        ("stop -> rank 0 exited (s)", lambda r: f"{r['rank0_exit_s']:.1f}"),
        ("stop -> every process gone (s)", lambda r: f"{r['all_gone_s']:.1f}"),
        (
            "a plain Dask scheduler removing W workers, its state alone (s)",
            lambda r: f"{r['floor_dask_s']:.4g}",
        ),
        (
            "start-cluster's scheduler removing them, its state alone (s)",
            lambda r: f"{r['floor_ours_s']:.4g}",
        ),
        ("rank 0's exit status", lambda r: str(r["rank0_status"])),
        ("rank 0's lines after the stop", lambda r: str(r["line_count"])),
        ("left in rank 0's directories", lambda r: ", ".join(r["left"]) or "nothing"),
        ("load avg (1 min) at the end", lambda r: f"{r['load']:.1f}"),
    ]
    table("", heads, rows, results)
    goals_table(("goal", "run", "measured", "target", "met"), goals(results))
    for r in results:
        print(f"\nW={r['workers']:,} {r['stop']}: rank 0 after the stop ({r['line_count']} "
              "lines, the first 6):")  # fmt: skip
        for line in r["lines"]:
            print(f"    {line[:160]}")


def runs(opts: argparse.Namespace, tmp: Path) -> Iterator[dict]:
    """Each W stopped each way asked for."""
    stops = ["command", "sigterm", "sigterm-ranks"] if opts.stop == "all" else [opts.stop]
    for workers in opts.workers:
        for stop in stops:
            r = run_one(workers, stop, opts, tmp)
            note(
                f"W={workers} {stop}: connected {r['connect_s']:.1f} s after the last start, "
                f"rank 0 gone {r['rank0_exit_s']:.1f} s after the stop, load {r['load']:.1f}"
            )
            yield r


PROG = "benchmarks.scale.stop"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_job":
        settled, sims, ready, stop, timeout = sys.argv[2:7]
        return job_main(settled, int(sims), ready, stop, float(timeout))
    p = parser(PROG, __doc__ or "", [1000, 10000], 900, "run")
    p.add_argument(
        "--stop",
        choices=("command", "sigterm", "sigterm-ranks", "all"),
        default="all",
        help="how the cluster is stopped (all: each way, a run each)",
    )
    opts = p.parse_args()
    return measure("dask-hpc-scale-stop-", opts.json, lambda tmp: runs(opts, tmp), report)


if __name__ == "__main__":
    sys.exit(main())
