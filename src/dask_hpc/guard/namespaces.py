"""What a user namespace hides from the checks of ``private``: the owners it does not map.

A container a user starts without privilege maps the user alone (and, with subordinate ids,
ids of the user's own): Apptainer's user-namespace mode (its default since 1.1.0 where it is
not installed setuid), Enroot as Pyxis runs it (``--no-container-remap-root``), rootless
podman. Inside, every file of root's or of another user of the node shows the kernel's
overflow id (``nobody``, 65534): the node's ``/tmp``, which the runtime binds there, looks like
a stranger's (measured: a second user's Pyxis job, "local directory /tmp belongs to nobody").

Where root is hidden so, the one owner taken on trust is root's own, fixed by the node's own
configuration: its sticky scratch directories at their own paths (``SYSTEM_STICKY``, and the
node-local scratch the site profile names, such as ALCF's ``/local/scratch``:
``planning.sites.Site.node_scratch``). Any other directory whose owner the namespace hides
stays refused.
(Rootless podman-hpc ranks get a local directory of their own instead:
``batch.runtimes.PODMAN_LOCAL``.)
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Collection
from pathlib import Path

# The node's sticky temporary directories: root's, mode 1777, on every Linux node (FHS 3.0,
# /tmp and /var/tmp; /dev/shm as systemd and every init mounts it).
SYSTEM_STICKY = ("/tmp", "/var/tmp", "/dev/shm")


@functools.cache
def overflow_uid() -> int:
    """The id the kernel shows for an owner this namespace does not map (65534 by default)."""
    try:
        return int(Path("/proc/sys/kernel/overflowuid").read_text())
    except (OSError, ValueError):
        return 65534


def maps_root(uid_map: str) -> bool:
    """Does a ``/proc/self/uid_map`` text map the parent namespace's root (uid 0 outside)?
    The node's own namespace does (``0 0 4294967295``)."""
    for line in uid_map.splitlines():
        fields = line.split()
        if len(fields) == 3:
            outside, count = int(fields[1]), int(fields[2])
            if outside <= 0 < outside + count:
                return True
    return False


@functools.cache
def root_hidden() -> bool:
    """Does this process run in a user namespace that hides the node's root?"""
    try:
        return not maps_root(Path("/proc/self/uid_map").read_text())
    except OSError:
        return False  # no /proc: nothing to tell, nothing taken on trust


def system_sticky(
    path: str | os.PathLike[str], st: os.stat_result, scratch: Collection[str] = SYSTEM_STICKY
) -> bool:
    """Is ``path`` (``st`` its status) one of the node's own sticky ``scratch`` directories,
    root's, shown with the overflow id by a user namespace that hides root?"""
    return (
        stat.S_ISDIR(st.st_mode)
        and bool(st.st_mode & stat.S_ISVTX)
        and st.st_uid == overflow_uid()
        and root_hidden()
        and os.path.normpath(os.fspath(path)) in scratch
    )
