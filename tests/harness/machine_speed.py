"""How fast this machine is right now: one line that `.ci/run` prints before and after a run.

The suite is CPU bound on 2 cores (docs/install.md, "The test suite"), and this machine's
speed changes by as much as the suite's own changes do: a loop of 10,000,000 squares took 0.30
to 0.59 CPU s within one hour (2026-12-02), with no steal time and nothing else running. Two
runs' times compare only beside these figures. The workloads are the suite's two kinds of
CPU: Python bytecode, and starting a Python (the kernel's fork, exec and page faults, and
imports).

    python3 tests/harness/machine_speed.py [LABEL]
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

ROUNDS = 5
LOOP = 2_000_000  # ~0.1 s of CPU a round here
STARTS = 10  # Pythons per round
START = [sys.executable, "-I", "-c", "import asyncio, json, ssl"]


def loop_cpu() -> float:
    """CPU seconds of a fixed pure-Python loop."""
    start = time.process_time()
    sum(i * i for i in range(LOOP))
    return time.process_time() - start


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_cpu() -> float:
    """CPU seconds of one Python started, importing a few of the standard library's modules."""
    before = children_cpu()
    for _ in range(STARTS):
        subprocess.run(START, check=True)
    return (children_cpu() - before) / STARTS


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "now"
    loop = statistics.median(loop_cpu() for _ in range(ROUNDS))
    start = statistics.median(start_cpu() for _ in range(ROUNDS))
    print(
        f"machine speed ({label}): a {LOOP:,}-square Python loop {loop:.3f} CPU s, a Python "
        f"start {start * 1000:.1f} ms of CPU (medians of {ROUNDS})",
        flush=True,
    )


if __name__ == "__main__":
    main()
