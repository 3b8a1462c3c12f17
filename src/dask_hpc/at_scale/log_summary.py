"""Dask's repeated warnings, summarised on the terminal: the first one, then counts and a few
names, at most one line per kind of warning per interval.

Some of Dask's warnings come once per worker or per connection. At 1,000 workers with 100
ranks killed, the scheduler printed 100 lines ``Removing worker ... caused the cluster to lose
already computed task(s): {every key}``; at 10,000 workers that is thousands of long lines in
a job's log. And every TLS handshake that a listener refuses is a warning: any local user can
fill the owner's terminal with connections that present no certificate. Here a filter on the
terminal's handler passes the first such warning as Dask wrote it, counts the next ones, and
at the end of the interval prints one line with their count and a few names (peers, workers);
Dask's other handlers (the scheduler's and workers' logs that ``client.get_scheduler_logs()``
and ``get_worker_logs()`` read) still get every record in full.

Measured (docs/security.md): 120 refused connections from another user are 4 lines on the
owner's terminal, not 120. Checked against distributed 2026.7.1 (the range's low end,
constraints.txt) and 2026.8.0 (the newest in range: tests/test_newest_dask.py runs its tests
there).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

SHOWN_NAMES = 4  # names in a summary line; the rest are counted
_ADDRESS = re.compile(r"[a-z]+://[\w.\-\[\]]+(:\d+)?")


@dataclass(frozen=True)
class Rule:
    """A kind of repeated warning: Dask's logger, its message (a pattern matched at its
    start: the template, or the text of an f-string), what the summary line counts."""

    name: str
    logger: str
    pattern: str
    what: str  # the summary line counts "N more <what>"
    interval: float  # seconds: at most one line per interval
    by_host: bool = False  # name peers by host: each connection comes from a new port
    subject_after: str = ""  # the record is about the first address after this text
    full_text: str = ""  # where every message is kept, for the summary line

    def matches(self, record: logging.LogRecord) -> bool:
        return record.name == self.logger and re.match(self.pattern, str(record.msg)) is not None

    def subject(self, record: logging.LogRecord) -> str:
        """Who the record is about: an address in the message (a peer, a worker)."""
        message = record.getMessage()
        found = _ADDRESS.search(message, max(0, message.find(self.subject_after)))
        if found is None:
            return "?"
        return found.group(0).split("://", 1)[1].rsplit(":", 1)[0] if self.by_host else found[0]


_SCHEDULER_LOGS = "every message: client.get_scheduler_logs()"
RULES = (
    # Every refused connection, from anyone who can reach a listener (scheduler, Nanny, worker).
    Rule("tls-refused", "distributed.comm.tcp", r"Listener on %r: TLS handshake failed",
         "TLS handshakes refused", 60.0, by_host=True, subject_after=" with remote "),
    # One per lost worker (a killed node's, or a hung one's), with every key it held.
    Rule("lost-computed", "distributed.scheduler",
         r"Removing worker .*? caused the cluster to lose already computed",
         "workers removed with computed results (recomputed elsewhere)", 5.0,
         full_text=_SCHEDULER_LOGS),
    Rule("lost-scattered", "distributed.scheduler",
         r"Removing worker .*? caused the cluster to lose scattered data",
         "workers removed with scattered data (lost)", 5.0, full_text=_SCHEDULER_LOGS),
    Rule("missed-heartbeats", "distributed.scheduler", r"Worker failed to heartbeat for",
         "workers that missed heartbeats", 5.0, full_text=_SCHEDULER_LOGS),
    Rule("unknown-heartbeat", "distributed.scheduler", r"Received heartbeat from unregistered",
         "heartbeats from unregistered workers", 5.0, full_text=_SCHEDULER_LOGS),
)  # fmt: skip


@dataclass
class _Window:
    """One rule's records since its last line: how many, from whom, the worst level."""

    started: float
    count: int = 0
    names: Counter[str] = field(default_factory=Counter)
    level: int = logging.WARNING
    timer: threading.Timer | None = None


class Summary(logging.Filter):
    """A terminal handler's filter: each rule's first record passes, the next ones in its
    interval are counted, and the interval ends with one line (none if nothing was counted;
    then the next record passes again)."""

    def __init__(self, handler: logging.Handler, rules: tuple[Rule, ...] = RULES,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        super().__init__()
        self.handler, self.rules, self.clock = handler, rules, clock
        self.windows: dict[str, _Window] = {}
        self.muted: set[str] = set()
        self.lock = threading.RLock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "dask_hpc_summary", False):
            return True
        rule = next((r for r in self.rules if r.matches(record)), None)
        if rule is None:
            return True
        with self.lock:
            if rule.name in self.muted:
                return False
            window = self.windows.get(rule.name)
            if window is None:  # the first in a while: shown as Dask wrote it
                self._open(rule)
                return True
            window.count += 1
            window.names[rule.subject(record)] += 1
            window.level = max(window.level, record.levelno)
            return False

    def _open(self, rule: Rule) -> None:
        window = self.windows[rule.name] = _Window(self.clock())
        window.timer = threading.Timer(rule.interval, self._interval_ended, (rule, window))
        window.timer.daemon = True
        window.timer.start()

    def _interval_ended(self, rule: Rule, window: _Window) -> None:
        with self.lock:
            if self.windows.get(rule.name) is not window:  # flushed meanwhile
                return
            del self.windows[rule.name]
            if window.count:  # keep counting: a steady flood gets one line per interval
                self._say(rule, window)
                self._open(rule)

    def flush(self, rule_names: set[str] | None = None) -> None:
        """The lines of what was counted so far (the process ends, or a rule is muted)."""
        with self.lock:
            for rule in self.rules:
                window = self.windows.get(rule.name)
                if window is None or (rule_names is not None and rule.name not in rule_names):
                    continue
                del self.windows[rule.name]
                if window.timer is not None:
                    window.timer.cancel()
                if window.count:
                    self._say(rule, window)

    def mute(self, rule_name: str) -> None:
        """From now on drop the rule's records (what was counted is said first)."""
        self.flush({rule_name})
        with self.lock:
            self.muted.add(rule_name)

    def _say(self, rule: Rule, window: _Window) -> None:
        seconds = max(1.0, self.clock() - window.started)
        record = logging.getLogger(rule.logger).makeRecord(
            rule.logger, window.level, __file__, 0, summary_line(rule, window, seconds), (), None
        )
        record.dask_hpc_summary = True
        self.handler.handle(record)


def summary_line(rule: Rule, window: _Window, seconds: float) -> str:
    """``49 more TLS handshakes refused in the last 60 s: 127.0.0.1 (49)``; a name with one
    record is listed without a count, and past ``SHOWN_NAMES`` names are only counted."""
    names = window.names.most_common()
    shown = [name if n == 1 else f"{name} ({n})" for name, n in names[:SHOWN_NAMES]]
    if len(names) > SHOWN_NAMES:
        shown.append(f"... {len(names) - SHOWN_NAMES} more")
    where = f"; {rule.full_text}" if rule.full_text else ""
    return f"{window.count} more {rule.what} in the last {seconds:.0f} s: {', '.join(shown)}{where}"


_SUMMARIES: list[Summary] = []  # this process's, one per terminal handler


def attach(handler: logging.Handler) -> Summary:
    """Summarise ``RULES`` on ``handler`` (once per handler)."""
    for summary in _SUMMARIES:
        if summary.handler is handler:
            return summary
    summary = Summary(handler)
    handler.addFilter(summary)
    _SUMMARIES.append(summary)
    return summary


def flush() -> None:
    """Every summary line still due in this process (call it before the process ends)."""
    for summary in list(_SUMMARIES):
        summary.flush()


def mute(rule_name: str) -> None:
    """Drop the rule's records on every terminal handler of this process from now on."""
    for summary in list(_SUMMARIES):
        summary.mute(rule_name)


def _forget_after_fork() -> None:
    """A forked child has none of its parent's timers; the parent says what it counted."""
    for summary in _SUMMARIES:
        summary.lock = threading.RLock()
        summary.windows.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(flush)
