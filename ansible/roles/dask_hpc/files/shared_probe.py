"""Read-only look at a node for the dask_hpc role: where a shared directory could live, and which
group ids are taken. Run on each node by tasks/validate.yml (``script``, the node's python3);
prints one JSON object. The role decides on the controller (filter_plugins/dask_hpc_shared.py).

argv[1]: JSON {"paths": [directories to look at], "subdir": "dask-hpc" or "", "group":
"dask-hpc"}; with a subdir, the node's network mounts and their subdir are looked at too. For
each path: whether
it exists, its nearest existing directory and that one's file system type (``stat -f``, which
works in a chroot, where /proc/mounts is absent), whether /etc/exports or /etc/exports.d exports
it (an NFS server's own export is a local file system), and its group id when it exists. Also the
network file systems mounted on the node (/proc/mounts, when readable), the group's id and every
group id in use (``getent group``).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys

# Mount types of shared file systems, as /proc/mounts names them.
NETWORK_FS = {
    "nfs", "nfs4", "lustre", "gpfs", "ceph", "cifs", "smb3", "beegfs", "glusterfs", "panfs",
    "wekafs", "fuse.sshfs", "fuse.glusterfs", "fuse.ceph", "fuse.beegfs", "9p", "virtiofs",
}  # fmt: skip


def fs_type(path: str) -> str:
    """What ``stat -f -c %T`` calls the file system of path (ext2/ext3, xfs, nfs, fuseblk, ...)."""
    out = subprocess.run(
        ["stat", "-f", "-c", "%T", path], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or "unknown"


def exports() -> list[str]:
    """Directories this node exports over NFS (/etc/exports, /etc/exports.d/*.exports)."""
    found = []
    for name in ["/etc/exports", *sorted(glob.glob("/etc/exports.d/*.exports"))]:
        try:
            with open(name) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line:
                words = shlex.split(line)
                if words and words[0].startswith("/"):
                    found.append(os.path.normpath(words[0]))
    return found


def network_mounts() -> list[str]:
    """Mount points of network file systems (empty where /proc/mounts cannot be read)."""
    try:
        with open("/proc/mounts") as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    # /proc/mounts writes a space in a path as \040.
    points = {r[1].replace("\\040", " ") for r in rows if len(r) > 2 and r[2] in NETWORK_FS}
    return sorted(points)


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def look(path: str, exported: list[str]) -> dict[str, object]:
    """What the node shows at path."""
    path = os.path.normpath(path)
    at = path
    while not os.path.exists(at):
        at = os.path.dirname(at)
    info: dict[str, object] = {
        "exists": at == path,
        "at": at,
        "fs": fs_type(at),
        "exported": next((e for e in exported if under(path, e)), None),
        "gid": os.stat(path).st_gid if at == path else None,
    }
    return info


def group_ids(group: str) -> tuple[int | None, list[int]]:
    """The group's id (None if there is no such group) and every group id in use."""
    out = subprocess.run(["getent", "group"], capture_output=True, text=True, check=False)
    mine, used = None, set()
    for line in out.stdout.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            used.add(int(fields[2]))
            if fields[0] == group:
                mine = int(fields[2])
    return mine, sorted(used)


def main() -> None:
    request = json.loads(sys.argv[1])
    exported = exports()
    gid, used = group_ids(request["group"])
    mounts = network_mounts()
    paths = list(request["paths"])
    if request.get("subdir"):
        paths += [p for m in mounts for p in (m, f"{m}/{request['subdir']}")]
    print(
        json.dumps(
            {
                "paths": {p: look(p, exported) for p in paths},
                "exports": exported,
                "network_mounts": mounts,
                "group_gid": gid,
                "gids": used,
            }
        )
    )


if __name__ == "__main__":
    main()
