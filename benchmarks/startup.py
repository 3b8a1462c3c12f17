"""Startup and shutdown of a Dask cluster on one node, launcher by launcher.

For 1, 4, 8 and 16 workers, time from launch until every worker is connected (the moment
COMMAND starts, or the floor's client sees them all), and from COMMAND's exit until the
launcher exits. Prints one table with ratios to the hand-written floor.

    python benchmarks/startup.py [--repeat 3] [--workers 1 4 8 16]

Methods:
  floor           hand-written: `dask scheduler` + N `dask worker --no-nanny` started at once,
                  a client polling until all N are connected (what the site scripts should do)
  nanny-spawn     `dask scheduler` + `dask worker --nworkers N` (N Nannies; Dask's default
                  multiprocessing-method, spawn), the same polling client
  nanny-forkserver  the same with multiprocessing-method forkserver
  local           start-cluster cpu N (no launcher: N Nannies forked from a forkserver), TLS on
  local-no-nanny  start-cluster cpu N --no-nanny (plain workers forked from the rank), TLS on
  mpiexec         mpiexec.openmpi -n N start-cluster cpu N (one worker per rank), TLS on
  srun            srun -n N start-cluster cpu N on a single-host Slurm (tests/harness), TLS on
  dask-mpi        mpiexec.openmpi -n N+2 python script using dask_mpi.initialize(), waiting for
                  N workers (needs `pip install dask-mpi mpi4py`)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from harness.mpi import openmpi  # noqa: E402
from harness.procs import MPI_LOOPBACK_ENV  # noqa: E402
from harness.slurm import SlurmCluster  # noqa: E402

STAMP = "import sys, time; open(sys.argv[1], 'w').write(repr(time.time()))"
FLOOR_CLIENT = """
import sys, time
from distributed import Client
n, sched, stamp = int(sys.argv[1]), sys.argv[2], sys.argv[3]
client = Client(scheduler_file=sched, timeout=120)
while len(client.scheduler_info(n_workers=-1)["workers"]) < n:
    time.sleep(0.01)
open(stamp, "w").write(repr(time.time()))
client.shutdown()
"""
DASK_MPI_JOB = """
import sys, time
from dask_mpi import initialize
initialize(nthreads=1, dashboard=False, interface="lo")
from distributed import Client
n, stamp = int(sys.argv[1]), sys.argv[2]
client = Client()
client.wait_for_workers(n, timeout=120)
open(stamp, "w").write(repr(time.time()))
"""


def timed(
    argv: list[str], env: dict[str, str], stamp: Path, timeout: float = 300
) -> tuple[float, float]:
    """(seconds until ready, seconds from ready until the launcher exited)."""
    stamp.unlink(missing_ok=True)
    start = time.time()
    proc = subprocess.run(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout
    )
    end = time.time()
    if proc.returncode != 0 or not stamp.exists():
        raise RuntimeError(
            f"{' '.join(argv[:6])}... failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
        )
    ready = float(stamp.read_text())
    return ready - start, end - ready


def cluster_cmd(n: int, stamp: Path, tmp: Path, *extra: str) -> list[str]:
    return [
        "start-cluster",
        "cpu",
        str(n),
        *extra,
        "--nthreads",
        "1",
        "--interface",
        "lo",
        "--local-directory",
        str(tmp / "local"),
        "--",
        sys.executable,
        "-c",
        STAMP,
        str(stamp),
    ]


def dask_cli_cmd(n: int, stamp: Path, tmp: Path, nanny: bool = False) -> list[str]:
    """`dask scheduler` and N workers started at once, a client polling until all N connect.

    ``nanny``: one `dask worker --nworkers N` (N Nannies); else N `dask worker --no-nanny`.
    """
    sched = tmp / f"cli-{time.monotonic_ns()}.json"
    dask = shutil.which("dask")
    common = (
        f"--nthreads 1 --no-dashboard --scheduler-file {sched} --local-directory {tmp / 'local'}"
    )
    if nanny:
        workers = f"{dask} worker --nworkers {n} {common} >/dev/null 2>&1 &"
    else:
        workers = " ".join(f"{dask} worker --no-nanny {common} >/dev/null 2>&1 &" for _ in range(n))
    script = (
        f"{dask} scheduler --port 0 --dashboard-address 127.0.0.1:0 --scheduler-file {sched} "
        f">/dev/null 2>&1 & {workers} {sys.executable} -c '{FLOOR_CLIENT}' {n} {sched} {stamp};"
        " wait"
    )
    return ["sh", "-c", script]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=[
            "floor",
            "nanny-spawn",
            "nanny-forkserver",
            "local",
            "local-no-nanny",
            "mpiexec",
            "srun",
            "dask-mpi",
        ],
    )
    opts = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dask-hpc-bench-"))
    env = {
        **os.environ,
        **MPI_LOOPBACK_ENV,
        "DASK_HPC__SCHEDULER_DIRECTORY": str(tmp / "s"),
        "PYTHONUNBUFFERED": "1",
    }
    slurm = None
    if "srun" in opts.methods:
        slurm = SlurmCluster(tmp / "slurm", nodes=1, cpus=32)
        slurm.start()
    stamp = tmp / "stamp"
    commands: dict[str, Callable[[int], tuple[list[str], dict[str, str]]]] = {
        "floor": lambda n: (dask_cli_cmd(n, stamp, tmp), env),
        "nanny-spawn": lambda n: (dask_cli_cmd(n, stamp, tmp, nanny=True), env),
        "nanny-forkserver": lambda n: (
            dask_cli_cmd(n, stamp, tmp, nanny=True),
            {**env, "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "forkserver"},
        ),
        "local": lambda n: (cluster_cmd(n, stamp, tmp), env),
        "local-no-nanny": lambda n: (cluster_cmd(n, stamp, tmp, "--no-nanny"), env),
        "mpiexec": lambda n: ([*openmpi(n), *cluster_cmd(n, stamp, tmp)], env),
        "srun": lambda n: (
            ["srun", "-n", str(n), "--kill-on-bad-exit=1", *cluster_cmd(n, stamp, tmp)],
            {**env, **slurm.env},
        ),
        "dask-mpi": lambda n: (
            [*openmpi(n + 2), sys.executable, "-c", DASK_MPI_JOB, str(n), str(stamp)],
            {**env, "MPI4PY_LIBMPI": "libmpi.so.40"},
        ),
    }
    results: dict[tuple[str, int], tuple[float, float]] = {}
    try:
        for n in opts.workers:
            for method in opts.methods:
                runs = []
                for _ in range(opts.repeat):
                    argv, run_env = commands[method](n)
                    runs.append(timed(argv, run_env, stamp))
                results[method, n] = (
                    statistics.median(r[0] for r in runs),
                    statistics.median(r[1] for r in runs),
                )
                print(
                    f"  measured {method:9s} n={n:2d}: ready {results[method, n][0]:.2f} s, "
                    f"shutdown {results[method, n][1]:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if slurm:
            slurm.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\nStartup until every worker is connected (median of {opts.repeat}), "
        f"{os.cpu_count()} CPUs; ratio to the hand-written floor"
    )
    first, last = opts.workers[0], opts.workers[-1]
    header = "| method | " + " | ".join(f"{n} worker{'s' if n > 1 else ''}" for n in opts.workers)
    print(header + f" | {last} vs {first} | shutdown ({last}) |")
    print("|---" * (len(opts.workers) + 3) + "|")
    for method in opts.methods:
        cells = []
        for n in opts.workers:
            ready = results[method, n][0]
            floor = results.get(("floor", n), (ready, 0))[0]
            cells.append(f"{ready:.2f} s ({ready / floor:.2f}x)")
        scale = results[method, last][0] / results[method, first][0]
        print(
            f"| {method} | "
            + " | ".join(cells)
            + f" | {scale:.2f}x | {results[method, last][1]:.2f} s |"
        )
    print_budget(results, opts.workers)
    return 0


def print_budget(results: dict[tuple[str, int], tuple[float, float]], sizes: list[int]) -> None:
    """Issue 8's performance budget against what was measured (where both sides ran)."""
    lines = []
    most, one = max(sizes), min(sizes)
    if ("local", most) in results and ("local-no-nanny", most) in results:
        ratio = results["local", most][0] / results["local-no-nanny", most][0]
        lines.append((f"local, {most} workers, vs the forked plain workers", ratio, 1.2, "x"))
    if ("local", 16) in results:
        lines.append(("shutdown of 16 local workers", results["local", 16][1], 1.0, " s"))
    if ("local", one) in results and ("floor", one) in results:
        ratio = results["local", one][0] / results["floor", one][0]
        lines.append((f"local, {one} worker, vs the floor", ratio, 1.1, "x"))
    if lines:
        print("\n| budget | measured | goal | met |\n|---|---|---|---|")
    for what, value, goal, unit in lines:
        print(
            f"| {what} | {value:.2f}{unit} | <= {goal}{unit} | {'yes' if value <= goal else 'NO'} |"
        )


if __name__ == "__main__":
    sys.exit(main())
