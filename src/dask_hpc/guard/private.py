"""Paths in places that other users can write: made race-free, or checked before use.

Another user of the node or of a shared file system can create, first, the directory, file or
symbolic link that we are about to use (``/tmp``, a project directory, a scheduler directory).
Every path dask-hpc creates or trusts there goes through this module:

- a directory we create is made with ``mkdir(0700)`` (or ``mkdtemp``), and one that already
  exists is opened without following a symlink and checked through its file descriptor: ours,
  a real directory, closed to the others (OpenSSH's ``StrictModes``, Jupyter's runtime
  directory check);
- a file is written under a random name (``mkstemp``: ``O_EXCL``) and renamed over its own;
- a file we trust (a scheduler file, a certificate) must be ours, a regular file nobody else
  can write, in a directory where nobody else can replace it (ours or root's, and not writable
  by others unless sticky), opened with ``O_NOFOLLOW``.

The directories and the checks live here, the files' reads and writes in :mod:`.private_files`.

A check that fails is one :class:`UnsafePath` line naming the path, what is wrong and the fix.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from . import namespaces
from .namespaces import SYSTEM_STICKY

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
OTHERS_ANY = 0o077


class UnsafePath(UsageError):
    """A path another user could have made or could change: refused (exit status 2)."""


def owner(st: os.stat_result) -> str:
    try:
        import pwd

        return pwd.getpwuid(st.st_uid).pw_name
    except (KeyError, ImportError):
        return f"uid {st.st_uid}"


def _group(st: os.stat_result) -> str:
    try:
        import grp

        return grp.getgrgid(st.st_gid).gr_name
    except (KeyError, ImportError):
        return f"gid {st.st_gid}"


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def directory_problem(st: os.stat_result, *, private: bool) -> str | None:
    """What makes a directory of ours unfit (``private``: closed to others, not only unwritable)."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"belongs to {owner(st)}, not to you"
    if stat.S_IMODE(st.st_mode) & (OTHERS_ANY if private else OTHERS_WRITE):
        return f"is open to other users (mode {_mode(st)})"
    return None


def parent_problem(
    st: os.stat_result, path: Path | None = None, scratch: Collection[str] = SYSTEM_STICKY
) -> str | None:
    """What lets another user replace entries of a directory we put things in (``path``, where
    known: one of the node's ``scratch`` in a user namespace, ``namespaces.system_sticky``)."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    seen_as_root = path is not None and namespaces.system_sticky(path, st, scratch)
    if st.st_uid not in (os.geteuid(), 0) and not seen_as_root:
        return f"belongs to {owner(st)}, who could replace what is put there"
    if st.st_mode & OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        return (
            f"can be written by other users and is not sticky (mode {_mode(st)}): they could "
            "replace what is put there"
        )
    return None


MAX_HOPS = 40  # symbolic links followed on one path (the kernel's own limit)


def changeable_by_others(path: str | os.PathLike[str]) -> str | None:
    """Why a user other than us and root could change what ``path`` names, or None.

    Every step from ``/`` down, as the kernel follows it: each directory ours or root's and
    not writable by others unless sticky (they could rename what is in it), each symbolic link
    ours or root's (followed, its target checked the same way), and the path itself ours or
    root's and not writable by others at all, sticky or not (in a directory, they could add
    a module or a file). Used for what is run or imported by path later (a directory on
    ``sys.path``, an image), where a later check would come too late.
    """
    return _walk(path, None)[0]


@dataclass(frozen=True)
class TrustedGroup:
    """The one group whose members a user chose to trust with a shared path (``hpc.image-group``:
    a project's group)."""

    name: str
    gid: int

    def has_member(self, uid: int) -> bool:
        """Is ``uid`` in the group, as the user database says (primary or supplementary)?"""
        try:
            import pwd

            user = pwd.getpwuid(uid)
            return self.gid in os.getgrouplist(user.pw_name, user.pw_gid)
        except (KeyError, ImportError, OSError):
            return False


def changeable_outside(
    path: str | os.PathLike[str], group: TrustedGroup
) -> tuple[str | None, bool]:
    """(why a user outside ``group``, other than us and root, could change ``path``, or None;
    whether only the group's trust let it through): :func:`changeable_by_others`'s walk, where a
    step may also be a member's, or writable by that group (by no other, no ACL naming more)."""
    return _walk(path, group)


def _step_problem(
    at: Path, st: os.stat_result, last: bool, group: TrustedGroup | None
) -> tuple[str | None, bool]:
    """(why others could change ``at``, or None; whether only ``group``'s trust allowed it)."""
    shared = st.st_uid not in (os.geteuid(), 0) and not namespaces.system_sticky(at, st)
    if shared and (group is None or not group.has_member(st.st_uid)):
        return f"{at} belongs to {owner(st)}", False
    if not last and st.st_mode & stat.S_ISVTX:
        return None, shared  # sticky: nobody else can rename what is in it
    if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and group is None):
        sticky = "" if last else " and is not sticky"
        return f"{at} can be written by other users (mode {_mode(st)}){sticky}", False
    if st.st_mode & stat.S_IWGRP and group is not None:
        if st.st_gid != group.gid:
            return f"{at} can be written by group {_group(st)} (mode {_mode(st)})", False
        try:
            acl = "system.posix_acl_access" in os.listxattr(at, follow_symlinks=False)
        except OSError:
            acl = False
        if acl:
            return f"{at} has an access control list (ls -l shows +; getfacl lists it)", False
        shared = True
    return None, shared


def _walk(path: str | os.PathLike[str], group: TrustedGroup | None) -> tuple[str | None, bool]:
    pending = [p for p in os.path.join(os.getcwd(), path).split("/") if p]
    done = Path("/")  # resolved so far: real directories only, each checked
    hops = 0
    shared = False
    while True:
        try:
            st = os.lstat(done)
        except OSError as error:
            return f"{done}: {error.strerror.lower()}", shared
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_HOPS:
                return f"{done} is a symbolic link of {owner(st)}'s", shared
            if st.st_uid not in (os.geteuid(), 0):
                if group is None or not group.has_member(st.st_uid):
                    return f"{done} is a symbolic link of {owner(st)}'s", shared
                shared = True
            target = os.readlink(done)
            pending = [p for p in target.split("/") if p] + pending
            done = Path("/") if target.startswith("/") else done.parent
            continue
        last = not pending
        problem, by_group = _step_problem(done, st, last, group)
        shared = shared or by_group
        if problem or last:
            return problem, shared
        step, pending = pending[0], pending[1:]
        if step == "..":
            done = done.parent
        elif step != ".":
            done = done / step


def check_parent(
    directory: Path, what: str, fix: str, scratch: Collection[str] = SYSTEM_STICKY
) -> None:
    """Refuse a directory in which another user could swap our entries for theirs (``scratch``:
    the node's own sticky directories, :func:`parent_problem`)."""
    try:
        st = os.stat(directory)
    except OSError as error:
        raise UnsafePath(f"{what} {directory}: {error.strerror.lower()}", fix) from None
    problem = parent_problem(st, directory, scratch)
    if problem:
        raise UnsafePath(f"{what} {directory} {problem}", fix)


def ensure_parent(
    directory: Path, what: str, fix: str, scratch: Collection[str] = SYSTEM_STICKY
) -> Path:
    """``directory`` made if missing (new components 0700), then :func:`check_parent`."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        pass  # not a directory: said below
    except OSError as error:
        raise UnsafePath(
            f"{what} {directory} is not usable ({error.strerror.lower()})", fix
        ) from None
    check_parent(directory, what, fix, scratch)
    return directory


@contextmanager
def open_directory(path: Path, follow: bool = False) -> Iterator[int]:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        yield fd
    finally:
        os.close(fd)


def own_directory(path: Path, what: str, fix: str, *, private: bool = True) -> Path:
    """``path`` as a directory of ours: made now (0700), or an existing one that is ours, a real
    directory (not a symlink) and closed to others (``private``) or at least unwritable by them.

    Its parent must not let others replace it (:func:`check_parent`). Only a directory made now
    is chmod'ed, through its file descriptor.
    """
    check_parent(path.parent, f"the directory holding the {what}", fix)
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        made = False
    except OSError as error:
        raise UnsafePath(f"{what} {path} cannot be made ({error.strerror.lower()})", fix) from None
    try:
        with open_directory(path) as fd:
            st = os.fstat(fd)
            problem = directory_problem(st, private=private)
            if problem is None and made:
                os.fchmod(fd, 0o700)  # what the umask took away
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            problem = "is not a directory (a symbolic link, or a file)"
        else:
            raise UnsafePath(f"{what} {path}: {error.strerror.lower()}", fix) from None
    if problem:
        raise UnsafePath(f"{what} {path} {problem}", fix)
    return path


def refuse_foreign(path: Path, what: str, fix: str) -> None:
    """Refuse a path already there that is not ours to use: a symbolic link, another user's,
    or one open to others (a stale directory of ours, closed to others, is fine)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        problem: str | None = "is a symbolic link"
    elif stat.S_ISDIR(st.st_mode):
        problem = directory_problem(st, private=True)
    else:
        problem = file_problem(st)
    if problem:
        raise UnsafePath(f"{what} {path} {problem}", fix)


def private_temporary_directory(
    base: Path, prefix: str, what: str, fix: str, scratch: Collection[str] = SYSTEM_STICKY
) -> Path:
    """A new directory of a random name in ``base`` (``mkdtemp``: 0700, never an existing one)."""
    check_parent(base, what, fix, scratch)
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    except OSError as error:
        raise UnsafePath(f"{what} {base} is not usable ({error.strerror.lower()})", fix) from None


# A Unix socket's path is at most 107 bytes (sun_path); a long $TMPDIR (a batch system's
# per-job directory, pytest's) left no room: "AF_UNIX path too long" and no workers.
SOCKET_PATH_MAX = 107


def socket_directory(prefix: str, longest_name: int) -> Path:
    """A new private directory (``mkdtemp``) for Unix sockets: in ``$TMPDIR``, or in /tmp
    where a socket of ``longest_name`` would not fit under ``$TMPDIR``."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if len(str(path)) + 1 + longest_name > SOCKET_PATH_MAX:
        path.rmdir()
        path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    return path


def file_problem(st: os.stat_result) -> str | None:
    """What makes a file untrustworthy: not a regular file, not ours, writable by others."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"belongs to {owner(st)}, not to you"
    if st.st_mode & OTHERS_WRITE:
        return f"can be written by other users (mode {_mode(st)})"
    return None
