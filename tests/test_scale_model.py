"""python -m benchmarks.scale.model: the per-worker costs' line, its projection, and its error
at a size left out of the fit (docs/scale.md, issue 46)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

COSTS = ("sched_join_ms", "sched_leave_ms", "connect_s", "shutdown_s")


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.scale.model", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def write_runs(path: Path, sizes: dict[int, float]) -> Path:
    """A benchmarks.scale --json file: each cost at each W is ``sizes[W]`` (x2 for the seconds)."""
    rows = [{"workers": w, **{k: v * (2 if k.endswith("_s") else 1) for k in COSTS}}
            for w, v in sizes.items()]  # fmt: skip
    path.write_text(json.dumps([*rows, {"workers": 40000, "not_run": "files"}]))
    return path


def cells(stdout: str) -> dict[str, list[str]]:
    rows = [line.split("|")[1:-1] for line in stdout.splitlines() if line.startswith("| ")]
    return {row[0].strip(): [c.strip() for c in row[1:]] for row in rows[1:]}


def test_a_line_projects_and_is_checked_at_the_size_left_out(tmp_path: Path) -> None:
    """Costs on a line (1 + 0.001 W) but at 10,000, which is 10% over it: the fit over every size
    is projected to 30,000, and 10,000 predicted without itself lands on the line, so its error
    is negative; 7,000, never measured, has no check."""
    line = {5000: 6.0, 10000: 11.0 * 1.1, 15000: 16.0, 20000: 21.0}
    first = write_runs(tmp_path / "a.json", {w: line[w] for w in (5000, 10000)})
    second = write_runs(tmp_path / "b.json", {w: line[w] for w in (15000, 20000)})
    result = run(str(first), str(second), "--at", "30000", "--check", "10000", "7000")
    assert result.returncode == 0, result.stderr
    table = cells(result.stdout)
    assert len(table) == len(COSTS), result.stdout
    for label, row in table.items():
        sizes, _, projected, at_10k, at_7k = row
        assert sizes == "5,000, 10,000, 15,000, 20,000", row
        scale = 2 if label.endswith("(s)") else 1
        assert float(projected) > 21.0 * scale, row  # past the largest size's cost
        measured, predicted, error = at_10k.split("; ")
        assert float(measured) == pytest.approx(12.1 * scale, rel=1e-3)
        assert float(predicted) == pytest.approx(11.0 * scale, rel=1e-3)  # the line, without it
        assert float(error.rstrip("%")) < 0
        assert at_7k == "–", row


def test_too_few_sizes_or_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    """One size, or a file that is not JSON: one line naming the problem and the fix, exit 2."""
    one = write_runs(tmp_path / "one.json", {10000: 2.0})
    broken = tmp_path / "broken.json"
    broken.write_text("not json")
    for path, words in ((one, "a line needs two"), (broken, "give the file")):
        result = run(str(path))
        assert result.returncode == 2, result.stdout
        assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
        assert words in result.stderr and "Traceback" not in result.stderr
