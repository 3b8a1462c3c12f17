"""Startup and shutdown of a Dask cluster on one node, launcher by launcher.

For 1, 4, 8 and 16 workers, time from launch until every worker is connected (the moment
COMMAND starts, or the floor's client sees them all), and from COMMAND's exit until the
launcher exits. Prints one table with ratios to the hand-written floor.

    python benchmarks/startup.py [--repeat 3] [--workers 1 4 8 16]

Methods:
  floor           hand-written: `dask scheduler` + N `dask worker --no-nanny` started at once,
                  a client polling until all N are connected (what the site scripts should do)
  local           start-cluster cpu N (no launcher: forked workers), TLS on (the default)
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


def cluster_cmd(n: int, stamp: Path, tmp: Path) -> list[str]:
    return [
        "start-cluster",
        "cpu",
        str(n),
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


def floor_cmd(n: int, stamp: Path, tmp: Path) -> list[str]:
    sched = tmp / f"floor-{time.monotonic_ns()}.json"
    dask = shutil.which("dask")
    workers = " ".join(
        f"{dask} worker --no-nanny --nthreads 1 --no-dashboard --scheduler-file {sched} "
        f"--local-directory {tmp / 'local'} >/dev/null 2>&1 &"
        for _ in range(n)
    )
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
        "--methods", nargs="+", default=["floor", "local", "mpiexec", "srun", "dask-mpi"]
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
        "floor": lambda n: (floor_cmd(n, stamp, tmp), env),
        "local": lambda n: (cluster_cmd(n, stamp, tmp), env),
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
