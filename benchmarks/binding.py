"""CPU binding of a rank that starts several workers: what Open MPI's default did, and now.

Runs four CPU-bound tasks (pure Python, ~0.5 s each on one core) on `start-cluster cpu 2`:
- under `mpiexec -n 1` (Open MPI binds a lone rank to one core; start-cluster now widens it),
- under `mpiexec -n 1 --bind-to none`,
- in local mode under `taskset -c 0` (every process on one core: what Open MPI's binding did
  to the scheduler, both workers and COMMAND before start-cluster widened it),
and prints the workers' affinity and the tasks' wall time (median of --repeat runs).

    python3 benchmarks/binding.py [--repeat 3]
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

OPENMPI = ["mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe",
           "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"]
JOB = """
import json, os, time
from distributed import Client

def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total

with Client() as client:
    client.submit(spin, 10, pure=False).result()  # warm
    start = time.perf_counter()
    client.gather(client.map(spin, [6_000_000] * 4, pure=False))
    wall = time.perf_counter() - start
    cpus = sorted(set(map(tuple, client.run(lambda: sorted(os.sched_getaffinity(0))).values())))
    print("BINDING " + json.dumps({"wall": wall, "cpus": cpus}), flush=True)
"""

METHODS = {
    "mpiexec -n 1 (Open MPI's default binding, widened)": [*OPENMPI, "-n", "1"],
    "mpiexec -n 1 --bind-to none": [*OPENMPI, "-n", "1", "--bind-to", "none"],
    "one core for everything (taskset -c 0, local mode)": ["taskset", "-c", "0"],
}


def run(prefix: list[str], directory: str) -> dict:
    argv = [*prefix, shutil.which("start-cluster") or "start-cluster", "cpu", "2",
            "--interface", "lo", "--dashboard-address", "127.0.0.1:0", "--",
            sys.executable, "-c", JOB]
    env = {**os.environ, "DASK_HPC__SCHEDULER_DIRECTORY": directory}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("BINDING ")), None)
    if line is None:
        raise SystemExit(f"{' '.join(prefix)}: no result\n{out.stdout}\n{out.stderr}")
    return json.loads(line[len("BINDING "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; CPUs: {os.cpu_count()}")
    print("| method | workers' CPUs | 4 tasks, wall (s): median (min-max) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for name, prefix in METHODS.items():
            results = [run(prefix, directory) for _ in range(args.repeat)]
            walls = [r["wall"] for r in results]
            cpus = " / ".join(",".join(map(str, c)) for c in results[-1]["cpus"])
            print(f"| {name} | {cpus} | {statistics.median(walls):.2f} "
                  f"({min(walls):.2f}-{max(walls):.2f}) |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
