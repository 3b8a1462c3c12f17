"""multiprocessing's forkserver and resource tracker, forked from the nanny host.

multiprocessing starts both as new Pythons (``spawnv_passfds``): the forkserver then imports
Dask again, what the nanny host has just imported. Forked from the nanny host once it has
imported Dask (and before it runs an event loop or a thread), each is a copy-on-write copy
that imports nothing: one interpreter start and one import of ``distributed`` fewer per rank.
Measured on 2 cores, one worker per rank (benchmarks/startup.py, CPU of a worker rank's
process tree): see docs/performance.md, issue 23.

Each child runs multiprocessing's own ``main`` with what ``spawnv_passfds`` would have passed
it, every other file descriptor closed, and the parent records it where multiprocessing
looks for it (``ForkServer._forkserver_pid`` ..., ``ResourceTracker._fd``), so Dask's Nanny
uses it unchanged. The forkserver's socket is in a directory its caller removes: no
``pymp-*`` directory is left behind by a nanny host that ends with ``os._exit`` (multiprocessing
removes its own at the interpreter's exit, which a forked child never reaches).

These are multiprocessing internals: where they are not as expected (another Python),
``start`` falls back to multiprocessing's own start, which is only slower.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from multiprocessing import forkserver, resource_tracker
from pathlib import Path

# What a child keeps besides the descriptors it is handed: stdin, stdout, stderr.
_STANDARD_FDS = (0, 1, 2)
_IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _close_fds_except(keep: set[int]) -> None:
    """Close every descriptor but ``keep`` (what ``spawnv_passfds`` does for a new Python)."""
    top = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16
    low = 0
    for fd in [*sorted(keep), top]:
        # Never an empty range: Python 3.11's os.closerange(0, 0) closes every descriptor.
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1


def _run_child(main: object, keep: set[int], *args: object) -> None:
    """In a forked child: keep ``keep``, run multiprocessing's ``main(*args)``, then exit
    without running the parent's exit handlers or finalizers."""
    code = 0
    try:
        _close_fds_except(keep | set(_STANDARD_FDS))
        main(*args)  # type: ignore[operator]
    except SystemExit:  # the forkserver's way of ending: its clients have all gone
        pass
    except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os._exit(code)


def supported() -> bool:
    """Are multiprocessing's internals the ones this module fills in (CPython 3.9-3.13)?"""
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    server = getattr(forkserver, "_forkserver", None)
    return (
        sys.platform.startswith("linux")
        # 3.14 authenticates the forkserver's clients (``_forkserver_authkey``): not filled in.
        and sys.version_info < (3, 14)
        and not hasattr(server, "_forkserver_authkey")
        and tracker is not None
        and all(hasattr(tracker, a) for a in ("_fd", "_pid", "_lock"))
        and server is not None
        and all(
            hasattr(server, a)
            for a in ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_lock")
        )
        and callable(getattr(forkserver, "main", None))
        and callable(getattr(resource_tracker, "main", None))
    )


def start_resource_tracker() -> int:
    """Fork the resource tracker; record it as this process's; return its pid."""
    tracker = resource_tracker._resource_tracker
    r, w = os.pipe()
    # As multiprocessing does (bpo-33613): SIGINT and SIGTERM stay blocked until the tracker
    # has set them to be ignored (its main unblocks them), so that a signal to the whole job
    # cannot end it first.
    signal.pthread_sigmask(signal.SIG_BLOCK, _IGNORED_SIGNALS)
    try:
        pid = os.fork()
        if pid == 0:
            _run_child(resource_tracker.main, {r}, r)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _IGNORED_SIGNALS)
    os.close(r)
    tracker._fd, tracker._pid = w, pid
    return pid


SOCKET_NAME = "forkserver"  # the forkserver's socket, in the directory it is given


def start_forkserver(directory: Path) -> int:
    """Fork the forkserver, listening in ``directory``; record it as this process's; return
    its pid.

    A socket file in a private directory (0700, the socket 0600), as multiprocessing makes it:
    an abstract socket would let any user of the node ask the forkserver to run code.
    """
    server = forkserver._forkserver
    address = str(directory / SOCKET_NAME)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        # Every client holds the write end of "alive": at EOF (all gone) the forkserver ends.
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            # As a spawned forkserver, it knows of no resource tracker: each request brings one.
            resource_tracker._resource_tracker._fd = None
            resource_tracker._resource_tracker._pid = None
            fd = listener.fileno()
            _run_child(forkserver.main, {fd, alive_r}, fd, alive_r, [])
        os.close(alive_r)
    finally:
        listener.close()
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid
    return pid


def start(directory: Path) -> bool:
    """Fork the resource tracker and the forkserver from this process (False: multiprocessing
    starts them itself, as new Pythons, when a worker is first started).

    ``directory``: private to this process (``tempfile.mkdtemp``), for the forkserver's
    socket; the caller removes it when it ends. Call this in a process that runs no thread,
    after it imported what the workers need.
    """
    if not supported():
        return False
    for stream in (sys.stdout, sys.stderr):  # or what they hold is written again by each child
        if stream is not None:
            stream.flush()
    if resource_tracker._resource_tracker._fd is None:
        start_resource_tracker()
    if forkserver._forkserver._forkserver_pid is None:
        start_forkserver(directory)
    return True
