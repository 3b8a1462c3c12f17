"""Startup and shutdown of a Dask cluster on one node, launcher by launcher.

For 1, 4, 8 and 16 workers, time from launch until every worker is connected (the moment
COMMAND starts, or the floor's client sees them all), and from COMMAND's exit until the
launcher exits. Prints one table with ratios to the hand-written floor, then (issue 23):

- CPU seconds: one more run per point with every rank (every `dask` process for the floor)
  under benchmarks/cpu_tree.py, which counts the CPU of its whole process tree (a forkserver
  left running included): per worker rank (what a node full of ranks pays per worker), and
  of the whole launch divided by the number of workers (launcher daemons not counted).
- The start chain of one worker rank that has a core to itself: a `dask scheduler` pinned to
  CPU 0 (with this process's polling client), one rank joining it pinned to CPU 1 (taskset
  inside the launcher), timed from launch until the scheduler lists its worker. What each rank
  waits for on a node with a core per rank.
- Goals: mpiexec, srun and flux within 1.1x of the floor and no slower than dask-mpi; local mode
  within 1.1x of the floor for 1 worker; shutdown under 0.5 s.

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
  flux            flux run -n N start-cluster cpu N in a one-broker Flux instance (flux-core
                  0.88, tests/harness/flux.py; 32 cores in its resource set, -o
                  cpu-affinity=off as Slurm's task/none), TLS on
  dask-mpi        mpiexec.openmpi -n N+2 python script using dask_mpi.initialize(), waiting for
                  N workers (needs `pip install dask-mpi mpi4py`); for the chain, one
                  `dask-mpi --no-scheduler --worker-class distributed.Worker` rank (initialize's
                  default worker class)
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(REPO))  # benchmarks.startup_report, when run as a script

from harness.flux import FluxInstance  # noqa: E402
from harness.mpi import openmpi  # noqa: E402
from harness.procs import MPI_LOOPBACK_ENV  # noqa: E402
from harness.slurm import SlurmCluster  # noqa: E402

from benchmarks.startup_report import print_tables  # noqa: E402

CPU_TREE = [sys.executable, str(REPO / "benchmarks" / "cpu_tree.py")]
STAMP = "import sys, time; open(sys.argv[1], 'w').write(repr(time.time()))"
FLOOR_CLIENT = """
import sys, time
from distributed import Client
n, sched, stamp = int(sys.argv[1]), sys.argv[2], sys.argv[3]
client = Client(scheduler_file=sched, timeout=120)
while len(client.sync(client.scheduler.identity, n_workers=-1)["workers"]) < n:
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


def dask_cli_cmd(
    n: int, stamp: Path, tmp: Path, nanny: bool = False, cpu_dir: Path | None = None
) -> list[str]:
    """`dask scheduler` and N workers started at once, a client polling until all N connect.

    ``nanny``: one `dask worker --nworkers N` (N Nannies); else N `dask worker --no-nanny`.
    ``cpu_dir``: each `dask` process under cpu_tree.py (labels scheduler, worker).
    """
    sched = tmp / f"cli-{time.monotonic_ns()}.json"
    dask = shutil.which("dask")
    common = (
        f"--nthreads 1 --no-dashboard --scheduler-file {sched} --local-directory {tmp / 'local'}"
    )

    def wrap(label: str) -> str:
        return " ".join([*CPU_TREE, str(cpu_dir), label, "--", ""]) if cpu_dir else ""

    worker, scheduler = wrap("worker"), wrap("scheduler")
    if nanny:
        workers = f"{worker}{dask} worker --nworkers {n} {common} >/dev/null 2>&1 &"
    else:
        workers = " ".join(
            f"{worker}{dask} worker --no-nanny {common} >/dev/null 2>&1 &" for _ in range(n)
        )
    script = (
        f"{scheduler}{dask} scheduler --port 0 --dashboard-address 127.0.0.1:0 "
        f"--scheduler-file {sched} "
        f">/dev/null 2>&1 & {workers} {sys.executable} -c '{FLOOR_CLIENT}' {n} {sched} {stamp};"
        " wait"
    )
    return ["sh", "-c", script]


def worker_rank_cpu(method: str, records: list[dict]) -> list[float]:
    """CPU seconds of each process tree that holds one worker and no scheduler."""
    if method in ("floor", "nanny-spawn", "nanny-forkserver"):
        return [r["cpu"] for r in records if r["label"] == "worker"]
    if method == "dask-mpi":  # rank 0: the scheduler, rank 1: the client
        return [r["cpu"] for r in records if r["rank"] not in ("0", "1")]
    if method in ("mpiexec", "srun", "flux"):
        return [r["cpu"] for r in records if r["rank"] != "0"]
    return []  # local: one rank, with the scheduler


def cpu_run(argv: list[str], env: dict[str, str], stamp: Path, cpu_dir: Path) -> list[dict]:
    """One run whose processes are under cpu_tree.py: their records."""
    shutil.rmtree(cpu_dir, ignore_errors=True)
    cpu_dir.mkdir()
    timed(argv, env, stamp)
    # The floor's processes may outlive the shell by a moment (their cpu_tree waits for them).
    deadline = time.monotonic() + 30
    records: list[dict] = []
    while time.monotonic() < deadline:
        records = [json.loads(p.read_text()) for p in cpu_dir.glob("*.json")]
        expected = wrapped_count(argv)
        if expected is None or len(records) >= expected:
            break
        time.sleep(0.05)
    return records


def wrapped_count(argv: list[str]) -> int | None:
    """How many cpu_tree records a run leaves (None: as many as the launcher's ranks)."""
    if argv[:2] == ["sh", "-c"]:
        return argv[2].count(CPU_TREE[1])
    return None


class Chain:
    """One worker rank with a core to itself joining a scheduler on the other core."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        from distributed import Client

        self.tmp, self.env = tmp, env
        self.sched_file = tmp / "chain-scheduler.json"
        os.sched_setaffinity(0, {0})  # this thread, and the client's threads made from it
        self.scheduler = subprocess.Popen(
            ["taskset", "-c", "0", shutil.which("dask") or "dask", "scheduler", "--port", "0"]
            + ["--no-dashboard", "--host", "127.0.0.1", "--scheduler-file", str(self.sched_file)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = Client(scheduler_file=str(self.sched_file), timeout=60)

    def argv(self, method: str) -> list[str] | None:
        pin = ["taskset", "-c", "1"]
        local = str(self.tmp / "local")
        cluster = [
            *pin,
            "start-cluster",
            "cpu",
            "1",
            "--join",
            str(self.sched_file),
            "--no-tls",
            "--nthreads",
            "1",
            "--interface",
            "lo",
            "--local-directory",
            local,
        ]
        dask_mpi = shutil.which("dask-mpi") or "dask-mpi"
        return {
            "floor": [*pin, shutil.which("dask") or "dask", "worker", "--no-nanny"]
            + ["--nthreads", "1", "--scheduler-file", str(self.sched_file)]
            + ["--local-directory", local],
            "local": cluster,
            "mpiexec": [*openmpi(1), *cluster],
            "srun": ["srun", "-n", "1", *cluster],
            "flux": ["flux", "run", "-n", "1", "-o", "cpu-affinity=off", *cluster],
            "dask-mpi": [*openmpi(1), *pin, dask_mpi, "--no-scheduler", "--scheduler-file"]
            + [str(self.sched_file), "--worker-class", "distributed.Worker", "--nthreads", "1"]
            + ["--interface", "lo", "--local-directory", local],
        }.get(method)

    def time(self, argv: list[str], env: dict[str, str]) -> float:
        """Seconds from launch until the scheduler lists the rank's worker; then it is closed."""
        before = set(self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"])
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        deadline = start + 120
        new: set[str] = set()
        while not new and time.monotonic() < deadline and proc.poll() is None:
            new = (
                set(self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"])
                - before
            )
            if not new:
                time.sleep(0.005)
        latency = time.monotonic() - start
        if new:
            self.client.retire_workers(list(new), close_workers=True, remove=True)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not new:
            raise RuntimeError(f"{' '.join(argv[:6])}... did not join ({proc.returncode}):\n{err}")
        return latency

    def close(self) -> None:
        self.client.close()
        self.scheduler.terminate()
        self.scheduler.wait(30)
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument(
        "--cpu-runs", type=int, default=1, help="runs under cpu_tree.py per point (0: none)"
    )
    parser.add_argument(
        "--chain-repeat", type=int, help="runs of the pinned start chain (default: --repeat)"
    )
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
            "flux",
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
    slurm = flux = None
    if "srun" in opts.methods:
        slurm = SlurmCluster(tmp / "slurm", nodes=1, cpus=32)
        slurm.start()
    if "flux" in opts.methods:
        flux = FluxInstance(tmp / "flux", size=1, cores=32).start()
    stamp = tmp / "stamp"
    cpu_dir = tmp / "cpu"
    wrap = [*CPU_TREE, str(cpu_dir), "rank", "--"]
    envs = {
        "nanny-forkserver": {
            **env,
            "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "forkserver",
        },
        "srun": {**env, **(slurm.env if slurm else {})},
        "flux": {**env, **(flux.env if flux else {})},
        "dask-mpi": {**env, "MPI4PY_LIBMPI": "libmpi.so.40"},
    }
    argvs: dict[str, Callable[[int, list[str], Path | None], list[str]]] = {
        "floor": lambda n, w, c: dask_cli_cmd(n, stamp, tmp, cpu_dir=c),
        "nanny-spawn": lambda n, w, c: dask_cli_cmd(n, stamp, tmp, nanny=True, cpu_dir=c),
        "nanny-forkserver": lambda n, w, c: dask_cli_cmd(n, stamp, tmp, nanny=True, cpu_dir=c),
        "local": lambda n, w, c: [*w, *cluster_cmd(n, stamp, tmp)],
        "local-no-nanny": lambda n, w, c: [*w, *cluster_cmd(n, stamp, tmp, "--no-nanny")],
        "mpiexec": lambda n, w, c: [*openmpi(n), *w, *cluster_cmd(n, stamp, tmp)],
        "srun": lambda n, w, c: [
            *["srun", "-n", str(n), "--kill-on-bad-exit=1"],
            *w,
            *cluster_cmd(n, stamp, tmp),
        ],
        "flux": lambda n, w, c: [
            *["flux", "run", "-n", str(n), "-o", "cpu-affinity=off"],
            *w,
            *cluster_cmd(n, stamp, tmp),
        ],
        "dask-mpi": lambda n, w, c: [
            *openmpi(n + 2),
            *w,
            *[sys.executable, "-c", DASK_MPI_JOB, str(n), str(stamp)],
        ],
    }
    results: dict[tuple[str, int], tuple[float, float]] = {}
    cpu: dict[tuple[str, int], tuple[float, float | None]] = {}  # (all / N, per worker rank)
    chain: dict[str, float] = {}
    load_seen: list[float] = []
    try:
        for n in opts.workers:
            for method in opts.methods:
                run_env = envs.get(method, env)
                runs = []
                for _ in range(opts.repeat):
                    load_seen.append(os.getloadavg()[0])
                    runs.append(timed(argvs[method](n, [], None), run_env, stamp))
                results[method, n] = (
                    statistics.median(r[0] for r in runs),
                    statistics.median(r[1] for r in runs),
                )
                line = (
                    f"  measured {method:9s} n={n:2d}: ready {results[method, n][0]:.2f} s, "
                    f"shutdown {results[method, n][1]:.2f} s"
                )
                if opts.cpu_runs:
                    totals, ranks = [], []
                    for _ in range(opts.cpu_runs):
                        records = cpu_run(argvs[method](n, wrap, cpu_dir), run_env, stamp, cpu_dir)
                        totals.append(sum(r["cpu"] for r in records) / n)
                        ranks.extend(worker_rank_cpu(method, records))
                    rank_cpu = statistics.median(ranks) if ranks else None
                    cpu[method, n] = (statistics.median(totals), rank_cpu)
                    line += f", CPU all/N {cpu[method, n][0]:.2f} s"
                    if rank_cpu is not None:
                        line += f", per worker rank {rank_cpu:.2f} s"
                print(line, file=sys.stderr, flush=True)
        if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
            pinned = Chain(tmp, env)
            try:
                for method in opts.methods:
                    argv = pinned.argv(method)
                    if argv is None:
                        continue
                    runs = [
                        pinned.time(argv, envs.get(method, env))
                        for _ in range(opts.chain_repeat or opts.repeat)
                    ]
                    chain[method] = statistics.median(runs)
                    print(f"  chain {method}: {chain[method]:.2f} s", file=sys.stderr, flush=True)
            finally:
                pinned.close()
    finally:
        if slurm:
            slurm.stop()
        if flux:
            flux.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print_tables(opts, results, cpu, chain, load_seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
