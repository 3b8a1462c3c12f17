"""The scale benchmark's per-worker costs as a line in W, and how well that line predicts.

    python -m benchmarks.scale.model RUN.json [RUN.json ...] [--at 30000] [--check 10000]

Reads what ``python -m benchmarks.scale --json`` wrote (one or more runs, a row per W), fits
each cost as ``a + b W`` by least squares over every size, and prints it at ``--at``. The
line's error is measured, not assumed: for each size in ``--check``, the same line fitted
without that size, its prediction there against what was measured (issue 46: "the model's
figure for 30,000 with its error at 10,000"). Figures are printed as measured (4 significant
digits); nothing is rounded before a comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import line

# What is modelled: the key in a benchmarks.scale result, and its label.
COSTS = (
    ("sched_join_ms", "scheduler loop CPU per join (ms)"),
    ("sched_leave_ms", "scheduler loop CPU per removal at the end (ms)"),
    ("connect_s", "last start -> all connected (s)"),
    ("shutdown_s", "COMMAND exit -> all gone (s)"),
)


def by_size(results: list[dict], key: str) -> dict[int, float]:
    """The cost ``key`` of each W measured (the last run of a W given twice wins)."""
    return {int(r["workers"]): float(r[key]) for r in results if r.get(key) is not None}


def report(results: list[dict], at: int, check: list[int]) -> list[str]:
    """The table's lines: a row per cost, its line, its figure at ``at``, and for each size in
    ``check`` measured / predicted without it / error."""
    heads = ["cost", "sizes", "a + b W (all sizes)", f"at {at:,}"]
    heads += [f"at {w:,}: measured; without it; error" for w in check]
    out = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    for key, label in COSTS:
        measured = by_size(results, key)
        if len(measured) < 2:
            continue
        a, b = line(list(measured), list(measured.values()))
        cells = [label, ", ".join(f"{w:,}" for w in sorted(measured)),
                 f"{a:.4g} + {b:.4g} W", f"{a + b * at:.4g}"]  # fmt: skip
        for w in check:
            others = {x: c for x, c in measured.items() if x != w}
            if w not in measured or len(others) < 2:
                cells.append("–")
                continue
            oa, ob = line(list(others), list(others.values()))
            predicted = oa + ob * w
            error = (predicted - measured[w]) / measured[w]
            cells.append(f"{measured[w]:.4g}; {predicted:.4g}; {error:+.1%}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale.model",
                                description=__doc__.splitlines()[0])  # fmt: skip
    p.add_argument("runs", nargs="+", type=Path, help="benchmarks.scale --json outputs")
    p.add_argument("--at", type=int, default=30000, help="the size to project to")
    p.add_argument("--check", type=int, nargs="*", default=[10000],
                   help="sizes each predicted by the line fitted without them")  # fmt: skip
    args = p.parse_args(argv)
    results: list[dict] = []
    for path in args.runs:
        try:
            results += [r for r in json.loads(path.read_text()) if "not_run" not in r]
        except (OSError, ValueError) as e:
            print(f"benchmarks.scale.model: cannot read {path} ({e}): give the file "
                  "benchmarks.scale --json wrote", file=sys.stderr)  # fmt: skip
            return 2
    if len({int(r["workers"]) for r in results}) < 2:
        print("benchmarks.scale.model: fewer than two sizes measured in these files: a line "
              "needs two (run benchmarks.scale with --workers W1 W2)", file=sys.stderr)  # fmt: skip
        return 2
    print("\n".join(report(results, args.at, args.check)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
