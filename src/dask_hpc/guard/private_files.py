"""Files in places that other users can write (see :mod:`.private`): written atomically under
a random name (``mkstemp``: ``O_EXCL``) and renamed over their own, linked the same way, and
read only when nobody else could have written them (``O_NOFOLLOW``, checked through the file
descriptor). A check that fails is one :class:`~.UnsafePath` line.
"""

from __future__ import annotations

import errno
import os
import secrets
import tempfile
from pathlib import Path

from .private import (
    UnsafePath,
    check_parent,
    file_problem,
    open_directory,
    owner,
    parent_problem,
)


def write_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``path`` atomically (readers see all of it or none): a new file of a random name
    (``O_EXCL``) beside it, renamed over it. Its directory must be safe
    (:func:`.private.check_parent`)."""
    check_parent(path.parent, "directory", f"put {path.name} in a directory only you can write")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        os.replace(tmp, path)
    except BaseException as error:
        os.unlink(tmp)
        if isinstance(error, PermissionError):  # a sticky directory: another user's file
            raise UnsafePath(
                f"{path} exists and belongs to another user", "use another name or directory"
            ) from None
        raise


MAX_LINKS = 8  # symbolic links followed, each ours, before a file is refused


def read_trusted(path: Path, what: str, _links: int = 0) -> bytes:
    """The contents of a file only we could have written (see the module's docstring).

    A symbolic link of ours, in a directory nobody else can change, is followed (``hpc-cluster
    up --scheduler-file`` makes one); another user's is refused.
    """
    fix = "use the one your own cluster wrote, in a directory only you can write"
    with open_directory(path.parent, follow=True) as dir_fd:
        problem = parent_problem(os.fstat(dir_fd))
        if problem:
            raise UnsafePath(f"the directory of {what} {path} {problem}", fix)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path.name, flags, dir_fd=dir_fd)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            link = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
            if link.st_uid != os.geteuid() or _links >= MAX_LINKS:
                raise UnsafePath(
                    f"{what} {path} is a symbolic link of {owner(link)}'s", fix
                ) from None
            target = path.parent / os.readlink(path.name, dir_fd=dir_fd)
            return read_trusted(target, what, _links + 1)
    with os.fdopen(fd, "rb") as f:
        problem = file_problem(os.fstat(f.fileno()))
        if problem:
            raise UnsafePath(f"{what} {path} {problem}", fix)
        return f.read()


def link(path: Path, target: Path) -> None:
    """Make ``path`` a symbolic link to ``target``, replacing a file of ours there (atomically:
    a new link of a random name, renamed over it)."""
    check_parent(path.parent, "directory", f"put {path.name} in a directory only you can write")
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except OSError as error:
        os.unlink(tmp)
        if isinstance(error, PermissionError):
            raise UnsafePath(
                f"{path} exists and belongs to another user", "use another name or directory"
            ) from None
        raise


def rewrite_own_file(path: Path, data: bytes) -> None:
    """Overwrite a file we made earlier (``mktemp``): never through a symlink, a hard link, a
    FIFO or another user's file; made (``O_EXCL``) if it is not there."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fix = "remove it; dask-hpc writes only its own files"
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            fd = os.open(path, flags)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO nobody reads
            raise UnsafePath(f"{path} is not a regular file", fix) from None
        raise
    with os.fdopen(fd, "wb") as f:
        st = os.fstat(f.fileno())
        problem = file_problem(st) or ("has other names (hard links)" if st.st_nlink != 1 else None)
        if problem:
            raise UnsafePath(f"{path} {problem}", fix)
        f.truncate(0)
        f.write(data)
