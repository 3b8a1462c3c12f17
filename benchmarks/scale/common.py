"""What the scale benchmarks (``lifecycle``, ``faults``, ``stop``) share: their common options,
the run of their measurements in a scratch directory, polling, and their Markdown tables."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .launch import SRC

PIN_HELP = ("rank 0 and the simulated ranks share every CPU (by default rank 0 has the first CPU "
            "to itself and the simulators the others)")  # fmt: skip


def parser(prog: str, doc: str, workers: int | list[int], timeout: float,
           per: str) -> argparse.ArgumentParser:  # fmt: skip
    """A benchmark's parser (``python -m prog``) with the options every one has: ``--workers``
    (one W, or several with a list as the default), ``--per-rank``, ``--no-pin``, ``--timeout``
    (seconds ``per`` run) and ``--json``."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc.splitlines()[0])
    if isinstance(workers, list):
        p.add_argument("--workers", type=int, nargs="+", default=workers,
                       help="W, all ranks' workers: one run (or --repeat) per W")  # fmt: skip
    else:
        p.add_argument("--workers", type=int, default=workers, help="W, all ranks' workers")
    p.add_argument("--per-rank", type=int, default=1, help="workers per simulated rank")
    p.add_argument("--no-pin", dest="pin", action="store_false", help=PIN_HELP)
    p.add_argument("--timeout", type=float, default=timeout, help=f"seconds per {per}")
    p.add_argument("--json", help="also write the results here")
    return p


def measure(prefix: str, json_out: str | None, runs: Callable[[Path], Iterable[dict]],
            report: Callable[[list[dict]], None]) -> int:  # fmt: skip
    """Run ``runs`` in a scratch directory (removed after), write what it measured to
    ``json_out`` (also what it measured before a failure), then print ``report``'s tables."""
    sys.path.insert(0, str(SRC))
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    results: list[dict] = []
    try:
        for result in runs(tmp):
            results.append(result)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if json_out:
            Path(json_out).write_text(json.dumps(results, indent=1))
    report(results)
    return 0


def note(text: str) -> None:
    """A line on stderr while the benchmark runs (the tables go to stdout at the end)."""
    print(f"  {text}", file=sys.stderr, flush=True)


def wait_for(condition: Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` s pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True


def line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares y = a + b x: (a, b); b is 0 where every x is the same."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return my - b * mx, b


Row = tuple[str, Callable[[dict], str]]  # a table's row: its label, and its cell of a result


def table(corner: str, heads: Sequence[str], rows: Iterable[Row], results: list[dict]) -> None:
    """A Markdown table: a column per result (headed ``heads``), a row per ``rows``."""
    print((f"| {corner} | " if corner else "| | ") + " | ".join(heads) + " |")
    print("|---" * (len(heads) + 1) + "|")
    for label, show in rows:
        print(f"| {label} | " + " | ".join(show(r) for r in results) + " |")


def goals_table(columns: Sequence[str], goals: Iterable[tuple[Sequence[str], bool]]) -> None:
    """The goals against what was measured: each goal's cells (``columns`` but the last), and
    whether it was met (the last, ``met``: yes or NO)."""
    print("\n| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    for cells, met in goals:
        print("| " + " | ".join(cells) + f" | {'yes' if met else 'NO'} |")
