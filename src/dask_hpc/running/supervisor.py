"""A single-threaded loop that owns this rank's child processes and its signals.

It never starts threads, so forking the scheduler and the workers from it is safe.
"""

from __future__ import annotations

import fcntl
import os
import selectors
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..planning.plan import ProcessSpec


@dataclass
class Child:
    """A process this rank started."""

    spec: ProcessSpec


class Supervisor:
    """Waits for child exits, signals and pipe input, with timeouts; never sleeps blindly."""

    def __init__(self) -> None:
        self.children: dict[int, Child] = {}
        self.exited: list[tuple[Child, int]] = []  # (child, wait status) not yet handled
        self.signals: list[int] = []
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, self._note_signal)

    def _note_signal(self, signum: int, frame: object) -> None:
        if signum != signal.SIGCHLD:
            self.signals.append(signum)

    def add(self, spec: ProcessSpec, pid: int) -> None:
        """Supervise the child ``pid`` (forked by the caller) that runs ``spec``."""
        self.children[pid] = Child(spec)

    def watch(self, fd: int, handler: Callable[[bytes], None]) -> None:
        """Call ``handler`` with what arrives on ``fd`` (b"" at end of file)."""
        self.selector.register(fd, selectors.EVENT_READ, handler)

    def watch_ready(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever ``fd`` is readable (it does the reading)."""
        self.selector.register(fd, selectors.EVENT_READ, ("ready", callback))

    def unwatch(self, fd: int) -> None:
        try:
            self.selector.unregister(fd)
        except (KeyError, ValueError):
            pass

    def poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for a signal, a child's exit or pipe input, and record it."""
        for key, _ in self.selector.select(max(0.0, timeout)):
            if key.data is None:
                try:
                    while os.read(self._wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            elif isinstance(key.data, tuple):
                key.data[1]()
            else:
                data = os.read(key.fd, 65536)
                if not data:
                    self.selector.unregister(key.fd)
                key.data(data)
        self._reap()

    def _reap(self) -> None:
        """Collect exits of our own children only (COMMAND is reaped by its Popen)."""
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self.exited.append((self.children.pop(pid), status))

    def signal_all(self, sig: int, role: str | None = None) -> None:
        for pid, child in list(self.children.items()):
            if role is None or child.spec.role == role:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def pids(self, role: str) -> list[int]:
        return [pid for pid, child in self.children.items() if child.spec.role == role]

    def wait_all(self, timeout: float) -> bool:
        """Wait until every child has exited; SIGKILL what is left after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.children and time.monotonic() < deadline:
            self.poll(min(0.5, deadline - time.monotonic()))
        if self.children:
            self.signal_all(signal.SIGKILL)
            while self.children:
                self.poll(0.5)
            return False
        return True

    def close(self) -> None:
        signal.set_wakeup_fd(self._old_wakeup)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.close(self._wake_r)
        os.close(self._wake_w)
