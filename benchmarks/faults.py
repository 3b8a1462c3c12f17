"""Measure what start-cluster does under faults, here, and print the reliability table.

Runs tests/test_faults.py and tests/test_node_loss.py (real Open MPI, MPICH, Slurm and Flux;
see docs/reliability.md) with ``DASK_HPC_FAULT_LOG`` set: each test appends what it measured
(seconds from the fault until every process of the test is gone). Prints a Markdown table:
median (min-max) over the runs.

    python benchmarks/faults.py [--repeat N] [-k PYTEST_EXPRESSION]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORDER = ["openmpi", "mpich", "srun"]


def run_tests(repeat: int, expression: str | None, log: Path) -> int:
    worst = 0
    for _ in range(repeat):
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += [str(REPO / "tests" / name) for name in ("test_faults.py", "test_node_loss.py")]
        if expression:
            argv += ["-k", expression]
        env = {**os.environ, "DASK_HPC_FAULT_LOG": str(log)}
        worst = max(worst, subprocess.run(argv, cwd=REPO, env=env).returncode)
    return worst


def table(entries: list[dict]) -> str:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    faults: list[str] = []
    for e in entries:
        groups[(e["fault"], e["launcher"])].append(e)
        if e["fault"] not in faults:
            faults.append(e["fault"])
    lines = [
        "| fault | launcher | what happens | measured | seconds: median (min-max, n) |",
        "|---|---|---|---|---|",
    ]
    for fault in faults:
        names = {name for f, name in groups if f == fault}
        for launcher in sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else 9, n)):
            runs = groups[(fault, launcher)]
            secs = [r["seconds"] for r in runs]
            spread = f"{min(secs):.1f}-{max(secs):.1f}" if len(secs) > 1 else f"{secs[0]:.1f}"
            outcome = runs[-1]["outcome"]
            lines.append(
                f"| {fault} | {launcher} | {outcome} | {runs[-1]['measured']} | "
                f"{statistics.median(secs):.1f} ({spread}, n={len(secs)}) |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole test file")
    parser.add_argument("-k", dest="expression", help="pytest -k expression")
    parser.add_argument("--log", type=Path, help="keep the raw JSON lines here")
    args = parser.parse_args()
    log = args.log or Path(tempfile.mkstemp(prefix="faults-", suffix=".jsonl")[1])
    status = run_tests(args.repeat, args.expression, log)
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    print(table(entries))
    if status:
        print(f"\nsome fault tests failed (pytest status {status})", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
