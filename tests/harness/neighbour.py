"""A second, unprivileged user of the node: the attacker of tests/neighbour/.

The tests run as root (the cluster's owner); what the other user does runs in a fork of the
test process that drops every privilege first (``setgroups([])``, ``setresgid``,
``setresuid``), so the kernel checks it as it checks that user's own processes. It runs no
new program (the test's Python lives under /root, which that user cannot enter): the modules
it uses are imported before the fork. ``tests/setup/users.sh`` creates the user; a machine
without it fails these tests, naming the script.

Shared places (``shared_place``) are made under /tmp, outside pytest's private tmp_path:
mode 1777 is a sticky directory such as /tmp or /local/scratch, 0777 (or 0770 with a shared
group) a project directory on Lustre or GPFS, which is neither sticky nor protected by the
kernel's ``protected_symlinks``.
"""

from __future__ import annotations

# What the other user's functions use but Python imports lazily: imported here, while the
# modules can still be read (after the privileges drop, /root, where they live, is closed).
import encodings.idna  # noqa: F401 - socket.create_connection's host names
import os
import pickle
import pwd
import select
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

NAME = "dask-hpc-intruder"
# The Python that user runs in its own jobs and namespaces (tests/setup/user_python.sh)
USER_PYTHON = Path(os.environ.get("DASK_HPC_TEST_CACHE", "/var/tmp/dask-hpc-tests")) / "user-python"
REPO = Path(__file__).resolve().parents[2]


def account() -> pwd.struct_passwd:
    """The other user's account; the test fails (does not skip) where it is missing."""
    try:
        return pwd.getpwnam(NAME)
    except KeyError:
        pytest.fail(f"no user {NAME}: run tests/setup/users.sh (as root)", pytrace=False)


def runs_user_python() -> pwd.struct_passwd:
    """The other user's account, which must run USER_PYTHON and reach the checkout (its
    ``src`` on that Python's path): fails (never skips) where it cannot."""
    if not (USER_PYTHON / "bin" / "start-cluster").exists():
        pytest.fail(f"{USER_PYTHON} missing: run tests/setup/user_python.sh (install.sh)")
    closed = [p for p in (REPO, *REPO.parents) if not os.stat(p).st_mode & 0o005]
    if closed:
        pytest.fail(f"{closed}: the other user cannot reach the checkout {REPO}")
    return account()


def _become(user: pwd.struct_passwd) -> None:
    os.setgroups([])
    os.setresgid(user.pw_gid, user.pw_gid, user.pw_gid)
    os.setresuid(user.pw_uid, user.pw_uid, user.pw_uid)
    os.umask(0o000)  # what it plants is as open as it can be
    os.chdir("/")


class Neighbour:
    """Runs functions as the other user."""

    def __init__(self, user: pwd.struct_passwd) -> None:
        self.user = user
        self.uid = user.pw_uid

    def _fork(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        stop_fd: int | None,
        parents_fds: tuple[int, ...] = (),
    ) -> tuple[int, int]:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the other user, until os._exit
            code = 0
            try:
                for fd in (read_fd, *parents_fds):
                    os.close(fd)
                _become(self.user)
                try:
                    result: Any = ("ok", fn(*args) if stop_fd is None else fn(stop_fd, *args))
                except Exception as error:  # noqa: BLE001 - handed to the test as data
                    result = ("error", f"{type(error).__name__}: {error}")
                data = pickle.dumps(result)
                with os.fdopen(write_fd, "wb") as out:
                    out.write(data)
            except BaseException:  # noqa: BLE001 - never return into pytest
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        return pid, read_fd

    @staticmethod
    def _collect(pid: int, read_fd: int, timeout: float) -> Any:
        chunks = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                ready, _, _ = select.select([read_fd], [], [], max(0.0, left))
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                    raise TimeoutError(f"the other user's action did not end in {timeout:g} s")
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(read_fd)
            os.waitpid(pid, 0)
        status, value = pickle.loads(b"".join(chunks))
        if status == "error":
            raise AssertionError(f"the other user's action failed: {value}")
        return value

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float = 30.0) -> Any:
        """``fn(*args)`` as the other user; its (picklable) result."""
        pid, read_fd = self._fork(fn, args, None)
        return self._collect(pid, read_fd, timeout)

    @contextmanager
    def meanwhile(self, fn: Callable[..., Any], *args: Any) -> Iterator[Callable[[], Any]]:
        """``fn(stop_fd, *args)`` as the other user while the block runs; it must return once
        ``stop_fd`` is readable (closed). Yields a function that stops it and returns its
        result (called on leaving the block if the test did not)."""
        stop_r, stop_w = os.pipe()
        pid, read_fd = self._fork(fn, args, stop_r, (stop_w,))
        os.close(stop_r)
        done: list[Any] = []

        def stop(timeout: float = 30.0) -> Any:
            if not done:
                done.append(None)  # once, even if collecting fails
                os.close(stop_w)
                done[0] = self._collect(pid, read_fd, timeout)
            return done[0]

        try:
            yield stop
        finally:
            if not done:
                stop()


def stopped(stop_fd: int, timeout: float = 0.0) -> bool:
    """In a ``meanwhile`` function: has the test asked it to end?"""
    return bool(select.select([stop_fd], [], [], timeout)[0])


@contextmanager
def shared_place(mode: int) -> Iterator[Path]:
    """A directory of root's that the other user can write (``mode``: 0o1777 sticky, 0o777 not),
    removed with whatever was put there."""
    path = Path(tempfile.mkdtemp(prefix="dask-hpc-shared-", dir="/tmp"))
    os.chmod(path, mode)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
