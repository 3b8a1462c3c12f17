"""Rank directories that killed ranks left behind, found and removed by the next rank.

Each rank works in a new private directory (``dask-hpc-XXXXXXXX``: ``mkdtemp``, 0700) that it
removes when it ends. A rank that is SIGKILLed (the kernel's OOM killer, a launcher's kill)
cannot: the directory, and what its workers spilled there, stays on the node, whose /tmp
may be memory (Aurora's). So a rank holds an flock on ``DIRECTORY/.held`` for its life, and
every process it forks shares it; when it starts, a rank removes each of the user's
``dask-hpc-*`` directories in its base that no living process holds.

Dask's ``WorkSpace`` does the same for its workers' directories, but in a directory with a
fixed name that it shares with every user (its own comment: "restrict to files owned by
current user?"), which another user can make first: here only the user's own private
directories are looked at, each opened without following a link, and removed through file
descriptors (``shutil.rmtree``'s own), so a link planted meanwhile is never followed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from .private import directory_problem, open_directory

PREFIX = "dask-hpc-"
HELD = ".held"


def hold(directory: Path) -> int | None:
    """Mark ``directory`` in use for as long as this process, or one it forks, lives; the
    returned descriptor stays open. The lock is taken before ``.held`` appears under its name,
    so a rank starting meanwhile never finds it free. None where the file system has no
    ``flock`` (a Lustre mounted without it): the directory is then never taken as left."""
    partial = directory / f"{HELD}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        partial.unlink()
        return None
    os.rename(partial, directory / HELD)
    return fd


def remove_left_behind(base: Path) -> list[Path]:
    """Remove the user's rank directories in ``base`` that no living process holds; returns
    those removed. Anything else (another user's, a link, an open one, one without ``.held``:
    being made, or made before ``hold``) is left alone."""
    removed: list[Path] = []
    try:
        names = [e.name for e in os.scandir(base) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    with open_directory(base, follow=True) as base_fd:
        for name in names:
            lock = _take(base_fd, name)
            if lock is None:
                continue
            try:
                # fd-based on Linux: it never follows a link put in its way (and in a
                # sticky base only we can replace our own directory's name)
                shutil.rmtree(base / name, ignore_errors=True)  # another rank's at once
            finally:
                os.close(lock)
            if not os.path.lexists(base / name):
                removed.append(base / name)
    return removed


def _take(base_fd: int, name: str) -> int | None:
    """The lock of ``name`` in ``base_fd``, taken, if it is a private directory of ours whose
    lock nobody holds; else None. Held until its removal: a rank starting at the same time
    skips it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        directory = os.open(name, flags, dir_fd=base_fd)
    except OSError:  # a link, not a directory, gone
        return None
    try:
        if directory_problem(os.fstat(directory), private=True):  # not ours alone
            return None
        lock = os.open(HELD, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
    except OSError:  # no .held, or not a file we may read
        return None
    finally:
        os.close(directory)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its rank, or a process it forked, still runs
        os.close(lock)
        return None
    return lock
