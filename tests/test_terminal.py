"""What a user sees on the terminal: start-cluster's lines and COMMAND's output, not Dask's
routine warnings (they stay in Dask's own logs), one line per event."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from support import start_cluster

JOB = Path(__file__).resolve().parent / "jobs" / "terminal_job.py"
OPTS = ["--dashboard-address", "127.0.0.1:0", "--timeout", "60"]

# Every line start-cluster's terminal may show for this run, in order ('?': may be absent).
EXPECTED = [
    ("?", r"start-cluster: workers 1/2 connected"),
    ("", r"start-cluster: workers 2/2 connected"),
    ("", r"start-cluster: Dask cluster ready: 2 cpu workers on 1 node\(s\), TLS on"),
    ("", r"  scheduler       tls://127\.0\.0\.1:\d+  \(on \S+\)"),
    ("", r"  scheduler file  /\S+/scheduler\.json"),
    ("", r"  connect         from dask_hpc import connect; client = connect\('/\S+'\)"),
    ("", r"  dashboard       http://127.0.0.1:\d+/status"),  # no token: not a terminal
    ("", r"  tokens left out \(this output is not a terminal, others may read it\): "
         r"hpc-cluster links /\S+/scheduler\.json"),
    ("", r"start-cluster: worker 0-1 was killed by signal 15: restarting it"),
    ("", r"start-cluster: command exited with status 0: shutting down"),
]


def check_lines(stderr: str) -> None:
    lines = stderr.splitlines()
    i = 0
    for optional, pattern in EXPECTED:
        if i < len(lines) and re.fullmatch(pattern, lines[i]):
            i += 1
        elif not optional:
            raise AssertionError(f"line {i + 1}: expected {pattern!r}, got:\n{stderr}")
    assert i == len(lines), f"unexpected lines from {i + 1} on:\n{stderr}"


def test_a_p2p_shuffle_a_killed_worker_and_a_clean_end_show_only_their_lines(
    run_cmd, cluster_env
) -> None:
    env = {k: v for k, v in cluster_env.items() if not k.startswith("SSH_")}
    argv = [*start_cluster(), "cpu", "2", *OPTS, "--", sys.executable, str(JOB)]
    result = run_cmd(argv, env=env, timeout=270)
    line = next((x for x in result.stdout.splitlines() if x.startswith("TERMINAL ")), "")
    out = json.loads(line[len("TERMINAL ") :] or "{}")
    assert "missing_after_rechunk" not in out, (out, result.stderr)
    assert result.returncode == 0, result.stderr
    assert out["sum"] == 2000 * 2000
    assert out["before"] == out["after"] == ["0-0", "0-1"]
    assert out["shuffle_warnings"] >= 1  # Dask's logger still says it, off the terminal
    check_lines(result.stderr)  # local mode on this machine: no ssh tunnel either
