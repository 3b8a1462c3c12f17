"""The names of a worker process's semaphores, removed from /dev/shm once it holds them.

Dask's Nanny hands each worker process it starts two multiprocessing queues: six POSIX named
semaphores (``/dev/shm/sem.mp-*``), which a worker started by the forkserver (or spawned) opens
by their names. multiprocessing removes a name when its semaphore is collected, or its resource
tracker does at the end: a rank SIGKILLed (srun on SIGTERM, a job's end past KillWait) did
neither, and left 6 names per worker in the node's /dev/shm (measured: 12 after one srun SIGTERM
of two one-worker ranks; ~3,300 on this machine after a day of test runs). Once the worker
process has connected it holds every one open: the names are removed then (a semaphore lives on
while open, as a file removed while open does), and multiprocessing's finalizer and tracker
entry of each are dropped, so that nothing removes a name twice.

These are multiprocessing internals (``Queue._rlock``, ``SemLock._semlock``,
``util._finalizer_registry``; CPython 3.9-3.13): where they are not as expected, nothing is
removed and the names stay until multiprocessing removes them, as before.
"""

from __future__ import annotations

import contextlib
from multiprocessing import resource_tracker, synchronize, util
from typing import Any

_LOCKS = ("_rlock", "_wlock", "_sem")  # a multiprocessing Queue's semaphores


def _names(queue: Any) -> list[str]:
    """The names of ``queue``'s semaphores still in /dev/shm (none under the fork context,
    which removes them as it makes them)."""
    names = []
    for attribute in _LOCKS:
        semlock = getattr(getattr(queue, attribute, None), "_semlock", None)
        name = getattr(semlock, "name", None)
        if isinstance(name, str):
            names.append(name)
    return names


def _drop_finalizers(names: set[str]) -> None:
    """Cancel multiprocessing's removal of ``names`` at collection or exit."""
    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):
        args = getattr(finalizer, "_args", None)
        if (
            getattr(finalizer, "_callback", None) is synchronize.SemLock._cleanup
            and args
            and args[0] in names
        ):
            finalizer.cancel()


def remove(*queues: Any) -> list[str]:
    """Remove the names of ``queues``' semaphores, which every process that uses them has
    open; return the names removed."""
    names = [name for queue in queues for name in _names(queue)]
    if not names or not hasattr(synchronize, "sem_unlink"):
        return []
    removed = []
    for name in names:
        with contextlib.suppress(OSError):  # gone already: nothing to remove
            synchronize.sem_unlink(name)
            removed.append(name)
    _drop_finalizers(set(names))
    for name in names:
        with contextlib.suppress(Exception):  # no tracker (none started): nothing registered
            resource_tracker.unregister(name, "semaphore")
    return removed
