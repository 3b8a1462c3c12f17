"""The dask_hpc role's shared directory and group id, decided on the controller from what every
node showed (files/shared_probe.py).

Scheduler files must be seen by every node, so with more than one node the shared directory must
lie on a network file system, or be what this node exports over NFS (DeepOps' slurm-master[0]
exports /home and /sw from its local disk). With ``dask_hpc_shared_dir: ""`` the role takes the
first candidate (``dask_hpc_shared_dir_candidates``: /sw, DeepOps' NFS-shared software prefix,
then /shared and /home), then any other network file system mounted on the node, that is shared
on this node, and checks that every node found the same one.

The group owning the directory needs one id on every node (a file on NFS carries the number):
the id the group already has, else the shared directory's group id, else the highest system id
(999 down to 201, as groupadd --system counts) free on every node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

# What `stat -f -c %T` calls local file systems (ext4 shows as ext2/ext3).
LOCAL_FS = {
    "ext2/ext3", "xfs", "btrfs", "tmpfs", "zfs", "overlayfs", "ramfs", "f2fs", "vfat", "msdos",
    "exfat", "jfs", "reiserfs", "squashfs", "devtmpfs",
}  # fmt: skip
SYSTEM_GIDS = range(999, 200, -1)

Probe = Mapping[str, Any]


def _shared(look: Mapping[str, Any]) -> bool:
    """Whether a directory that exists lies on a network file system or is exported here."""
    return bool(look["exists"]) and (look["fs"] not in LOCAL_FS or look["exported"] is not None)


def candidates(probe: Probe, configured: Sequence[str]) -> list[str]:
    """The configured candidates, then the node's other network mounts, in order."""
    seen: list[str] = []
    for path in [*configured, *probe.get("network_mounts", [])]:
        path = os.path.normpath(path)
        if path not in seen and path != "/":
            seen.append(path)
    return seen


def choice(probe: Probe, configured: Sequence[str], subdir: str) -> str | None:
    """The shared directory this node would take: SUBDIR in its first shared candidate."""
    for path in candidates(probe, configured):
        look = probe["paths"].get(path)
        if look is not None and _shared(look):
            return f"{path}/{subdir}"
    return None


def _local_problem(host: str, path: str, look: Mapping[str, Any], size: int) -> str | None:
    if look["fs"] not in LOCAL_FS or look["exported"] is not None:
        return None
    return (
        f"dask_hpc_shared_dir {path} is on a local file system ({look['fs']} at {look['at']}) "
        f"of {host}, but the cluster has {size} nodes: workers elsewhere would never see the "
        "scheduler files. Mount a shared file system (NFS, Lustre, GPFS, ...) there first, point "
        "dask_hpc_shared_dir at one, or set dask_hpc_shared_dir_check=false."
    )


def shared_dir(
    probes: Mapping[str, Probe],
    host: str,
    explicit: str,
    configured: Sequence[str],
    subdir: str,
    size: int,
    check: bool,
) -> dict[str, Any]:
    """{"path": the shared directory of host, "problems": [one sentence each]}."""
    probe = probes[host]
    if explicit:
        path = os.path.normpath(explicit)
        problem = None
        if check and size > 1:
            problem = _local_problem(host, path, probe["paths"][path], size)
        return {"path": path, "problems": [problem] if problem else []}
    mine = choice(probe, configured, subdir)
    fallback = f"{os.path.normpath(configured[0])}/{subdir}" if configured else ""
    if size <= 1 or not check:
        return {"path": mine or fallback, "problems": []}
    if mine is None:
        looked = ", ".join(candidates(probe, configured))
        return {
            "path": fallback,
            "problems": [
                f"{host} shares none of {looked} over a network file system or an NFS export, "
                f"and the cluster has {size} nodes: scheduler files must be seen by every node. "
                "Mount a shared file system there first (DeepOps: nfs_mounts, /sw from "
                "slurm-master[0]), or set dask_hpc_shared_dir to a directory every node shares."
            ],
        }
    others = {h: choice(p, configured, subdir) for h, p in sorted(probes.items())}
    differ = {h: c for h, c in others.items() if c is not None and c != mine}
    if differ:
        found = ", ".join(f"{h}: {c}" for h, c in others.items() if c is not None)
        return {
            "path": mine,
            "problems": [
                f"The nodes found different shared directories ({found}): set dask_hpc_shared_dir "
                "to one every node shares."
            ],
        }
    return {"path": mine, "problems": []}


def group_gid(
    probes: Mapping[str, Probe], host: str, paths: Mapping[str, str], group: str
) -> dict[str, Any]:
    """{"gid": the group id for host's group, "problems": [...]}: one id on every node."""
    have = {h: p["group_gid"] for h, p in sorted(probes.items()) if p.get("group_gid") is not None}
    on_disk = {
        h: p["paths"][paths[h]]["gid"]
        for h, p in sorted(probes.items())
        if paths.get(h) in p["paths"] and p["paths"][paths[h]]["gid"] is not None
    }
    if len(set(have.values())) > 1:
        found = ", ".join(f"{h}: {g}" for h, g in have.items())
        return {
            "gid": have.get(host),
            "problems": [
                f"Group {group} has different ids on the nodes ({found}): files in the shared "
                "directory would belong to another group on each. Give it one id everywhere "
                f"(groupmod -g) and set dask_hpc_group_gid to it."
            ],
        }
    if have:
        gid = next(iter(have.values()))
    elif on_disk:
        gid = next(iter(on_disk.values()))
    else:
        used = set().union(*(set(p["gids"]) for p in probes.values()))
        gid = next((g for g in SYSTEM_GIDS if g not in used), None)
        if gid is None:
            return {
                "gid": None,
                "problems": [
                    f"No group id from 201 to 999 is free on every node for group {group}: "
                    "set dask_hpc_group_gid."
                ],
            }
    problems = []
    mine = probes[host]
    if mine.get("group_gid") is None and gid in mine["gids"]:
        problems.append(
            f"Group {group} needs id {gid} on {host} (its id on the other nodes or of the shared "
            f"directory), where another group has it: free it, or set dask_hpc_group_gid."
        )
    disk = on_disk.get(host)
    if disk is not None and disk != gid and have:
        problems.append(
            f"The shared directory {paths[host]} belongs to group id {disk}, but group {group} "
            f"has id {gid}: give the group that id everywhere (groupmod -g) or chgrp the "
            "directory, or set dask_hpc_group_gid."
        )
    return {"gid": gid, "problems": problems}


class FilterModule:
    """Ansible filter plugin: dask_hpc_shared_dir, dask_hpc_group_id."""

    def filters(self) -> dict[str, Any]:
        return {"dask_hpc_shared_dir": shared_dir, "dask_hpc_group_id": group_gid}
