"""Dask's repeated warnings summarised on the terminal (log_summary): the filter alone, then a
real cluster whose listeners refuse many connections from one peer."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading

from support import TESTS, start_cluster

from dask_hpc.at_scale import log_summary
from dask_hpc.at_scale.log_summary import Rule, Summary

JOB = TESTS / "jobs" / "refused_connections.py"
TCP = "distributed.comm.tcp"
REFUSED = "Listener on %r: TLS handshake failed with remote %r: %s"


class Lines(logging.Handler):
    """What reaches the terminal: each line, and an event per line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.arrived = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.arrived:
            self.lines.append(record.getMessage())
            self.arrived.notify_all()

    def wait_for(self, n: int, timeout: float = 30) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.lines) >= n, timeout)


def refused(peer: str, port: int) -> logging.LogRecord:
    args = ("tls://10.0.0.1:8786", f"tls://{peer}:{port}", "EOF")
    return logging.LogRecord(TCP, logging.WARNING, __file__, 0, REFUSED, args, None)


def summarised(interval: float = 60.0) -> tuple[Lines, Summary]:
    lines = Lines()
    rule = Rule("tls-refused", TCP, r"Listener on %r: TLS handshake failed", "TLS handshakes "
                "refused", interval, by_host=True, subject_after=" with remote ")  # fmt: skip
    summary = Summary(lines, (rule,))
    lines.addFilter(summary)
    return lines, summary


def test_the_first_warning_passes_the_next_are_counted_by_peer() -> None:
    lines, summary = summarised()
    for i in range(30):
        lines.handle(refused("127.0.0.9", 40000 + i))
    for i in range(20):
        lines.handle(refused("127.0.0.7", 50000 + i))
    other = logging.LogRecord(TCP, logging.WARNING, __file__, 0, "something else", (), None)
    lines.handle(other)  # not the rule's: untouched
    assert len(lines.lines) == 2 and lines.lines[0].startswith("Listener on 'tls://10.0.0.1")
    summary.flush()
    assert len(lines.lines) == 3
    assert re.fullmatch(r"49 more TLS handshakes refused in the last \d+ s: "
                        r"127\.0\.0\.9 \(29\), 127\.0\.0\.7 \(20\)", lines.lines[2])  # fmt: skip
    lines.handle(refused("127.0.0.9", 1))  # after a flush: the next one passes again
    assert len(lines.lines) == 4 and lines.lines[3].startswith("Listener on")


def test_a_steady_flood_gets_one_line_per_interval() -> None:
    lines, summary = summarised(interval=0.2)
    lines.handle(refused("127.0.0.9", 1))
    for i in range(3):  # three intervals, each with more of them: a line at the end of each
        for port in range(10):
            lines.handle(refused("127.0.0.9", port))
        assert lines.wait_for(2 + i), lines.lines
        assert lines.lines[-1].startswith("10 more TLS handshakes refused")
    assert lines.wait_for(5, timeout=1) is False  # a quiet interval: no line ...
    summary.flush()
    lines.handle(refused("127.0.0.9", 2))  # ... and the next one passes as Dask wrote it
    assert lines.lines[-1].startswith("Listener on") and len(lines.lines) == 5


def test_many_names_are_counted_past_a_few() -> None:
    lines, summary = summarised()
    for i in range(11):
        lines.handle(refused(f"127.0.1.{i}", 1))
    summary.flush()
    assert lines.lines[-1].endswith(": 127.0.1.1, 127.0.1.2, 127.0.1.3, 127.0.1.4, ... 6 more")


def test_muting_says_what_was_counted_then_drops_the_rest() -> None:
    lines, summary = summarised()
    for port in range(5):
        lines.handle(refused("127.0.0.9", port))
    summary.mute("tls-refused")
    for port in range(5):
        lines.handle(refused("127.0.0.9", port))
    assert len(lines.lines) == 2 and lines.lines[1].startswith("4 more TLS handshakes refused")


def test_a_scheduler_warning_per_lost_worker_is_summarised() -> None:
    lines = Lines()
    summary = Summary(lines)  # the module's own rules
    lines.addFilter(summary)
    for i in range(100):
        msg = (f"Removing worker 'tls://127.0.{i}.1:4000' caused the cluster to lose already "
               f"computed task(s), which will be recomputed elsewhere: {{('x', {i})}} "
               "(stimulus_id='handle-worker-cleanup-1')")  # fmt: skip
        lines.handle(logging.LogRecord("distributed.scheduler", logging.WARNING, __file__, 0,
                                       msg, (), None))  # fmt: skip
    summary.flush()
    assert len(lines.lines) == 2 and lines.lines[0].startswith("Removing worker 'tls://127.0.0.1")
    assert lines.lines[1].startswith(
        "99 more workers removed with computed results (recomputed elsewhere) in the last "
    )
    assert lines.lines[1].endswith(
        "tls://127.0.1.1:4000, tls://127.0.2.1:4000, tls://127.0.3.1:4000, "
        "tls://127.0.4.1:4000, ... 95 more; every message: client.get_scheduler_logs()"
    )


def test_attach_is_once_per_handler() -> None:
    handler = logging.StreamHandler()
    try:
        assert log_summary.attach(handler) is log_summary.attach(handler)
        assert sum(isinstance(f, Summary) for f in handler.filters) == 1
    finally:
        log_summary._SUMMARIES[:] = [s for s in log_summary._SUMMARIES if s.handler is not handler]


def test_refused_connections_from_one_peer_are_two_lines_per_listener(run_cmd, cluster_env):
    """50 connections to a real cluster's scheduler and 10 to a worker, each refused (plain
    TCP, TLS without a certificate): each listener's process prints Dask's first warning and
    one line with the count of the others, not a warning each."""
    argv = [*start_cluster(), "cpu", "1", "--dashboard-address", "127.0.0.1:0", "--",
            sys.executable, str(JOB), "50", "10"]  # fmt: skip
    result = run_cmd(argv, env=cluster_env, timeout=120)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("REFUSED "))
    assert json.loads(line[len("REFUSED ") :]) == {"scheduler": 50, "worker": 10}
    about = [x for x in result.stderr.splitlines() if "TLS handshake" in x]
    assert len(about) == 4, result.stderr  # scheduler and worker: 2 lines each
    firsts = [x for x in about if "TLS handshake failed with remote 'tls://127.0.0.1:" in x]
    counts = sorted(int(m[1]) for x in about
                    if (m := re.search(r" (\d+) more TLS handshakes refused in the last \d+ s: "
                                       r"127\.0\.0\.1 \(\d+\)$", x)))  # fmt: skip
    assert len(firsts) == 2 and counts == [9, 49], result.stderr
