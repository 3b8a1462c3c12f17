"""start-cluster's checks inside a user namespace that hides root (``guard.namespaces``): the
view of an unprivileged container (Apptainer's user-namespace mode, Enroot under Pyxis,
rootless podman), where every owner but the user shows the overflow id.

Real parts: the kernel's user namespaces (``unshare --user --map-current-user``, as the node's
second user), the checks of ``dask_hpc.guard.private`` run there, in the second user's Python
(tests/setup/user_python.sh). The jobs that met it are in tests/containers (test_pyxis.py,
test_podman_hpc.py).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from harness.neighbour import REPO, USER_PYTHON, runs_user_python

from dask_hpc.guard import namespaces

CHECK = """
import os, sys
from pathlib import Path
from dask_hpc.guard import namespaces, private
print("HIDDEN", namespaces.root_hidden(), os.stat("/tmp").st_uid)
for path in sys.argv[1:]:
    try:
        private.check_parent(Path(path), "local directory", "FIX")
        made = private.private_temporary_directory(Path(path), "ns-", "local directory", "FIX")
        print("OK", path, oct(os.stat(made).st_mode & 0o777))
        made.rmdir()
    except private.UnsafePath as error:
        print("REFUSED", path, error)
"""


def in_user_namespace(*paths: str) -> list[str]:
    """CHECK's lines, run as the second user in a user namespace of its own that maps that
    user alone."""
    user = runs_user_python()
    argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    argv += ["unshare", "--user", "--map-current-user", str(USER_PYTHON / "bin" / "python")]
    ran = subprocess.run(
        [*argv, "-c", CHECK, *paths],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran
    return ran.stdout.splitlines()


def test_the_nodes_tmp_is_taken_as_roots_and_nothing_else_whose_owner_is_hidden() -> None:
    """In the namespace root shows as nobody: the node's own sticky /tmp is still a local
    directory's base; a sticky directory of root's elsewhere, whose owner the namespace hides as
    well, is refused in one line, as one of another user's."""
    other = Path(tempfile.mkdtemp(prefix="dask-hpc-sticky-", dir="/tmp"))
    try:
        other.chmod(0o1777)  # root's, sticky: it looks like /tmp, but is not the node's own
        lines = in_user_namespace("/tmp", str(other))
    finally:
        other.rmdir()
    assert lines[0] == f"HIDDEN True {namespaces.overflow_uid()}", lines
    assert lines[1] == "OK /tmp 0o700", lines
    assert lines[2].startswith(f"REFUSED {other} local directory {other} belongs to "), lines
    assert lines[2].endswith("who could replace what is put there; FIX"), lines


@pytest.mark.parametrize(
    ("uid_map", "maps"),
    [
        ("         0          0 4294967295\n", True),  # the node's own namespace
        ("         0        999          1\n         1     300000      65536\n", False),  # podman
        ("       999        999          1\n", False),  # Apptainer, Enroot
        ("         0          0          1\n", True),  # root mapped, and only root
    ],
)
def test_a_uid_map_says_whether_the_nodes_root_is_mapped(uid_map: str, maps: bool) -> None:
    """/proc/self/uid_map's lines (inside, outside, count): root is hidden unless a line maps
    outside id 0."""
    assert namespaces.maps_root(uid_map) is maps


def test_outside_a_user_namespace_nobodys_sticky_directory_is_refused(tmp_path: Path) -> None:
    """Where root is not hidden (this process), an owner shown as nobody is the real user
    nobody: even at /tmp's path, nothing is taken on trust."""
    assert not namespaces.root_hidden()
    base = tmp_path / "base"
    base.mkdir()
    base.chmod(0o1777)
    os.chown(base, namespaces.overflow_uid(), -1)
    assert not namespaces.system_sticky("/tmp", os.stat(base))


def test_the_node_scratch_taken_on_trust_is_the_systems_and_the_site_profiles() -> None:
    """The node's own sticky directories: the operating system's and the node-local scratch a
    site profile names (Polaris: /local/scratch); a profile's directory that names a variable
    (Frontier's /mnt/bb/$USER) is the user's own, and not among them."""
    from dask_hpc.planning.sites import load_site

    system = ("/tmp", "/var/tmp", "/dev/shm")
    assert load_site("polaris").node_scratch() == (*system, "/local/scratch")
    assert load_site("frontier").node_scratch() == system
    assert load_site("perlmutter").node_scratch() == (*system, "/tmp")
