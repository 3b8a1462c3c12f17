"""Rootless podman's pause process ends with the run files the job gave podman, also when a
podman of those run files runs late (conmon runs podman's cleanup as a container ends, beside
``podman run``'s own return, and a podman that finds the pause process gone starts a new one).

Real parts: podman 4.3.1 (Debian's) and a second user with subordinate ids, as
tests/setup/podman.sh and users.sh make them; the job script's own shell function
(``dask_hpc.batch.runtimes.PODMAN_REMOVE``). The late cleanup is a real ``podman unshare`` started
by a script named podman, as conmon starts podman's (its delay emulated: it waits for the pause
process to end, 3 s at most). Before, the pause process was ended as the last podman returned,
and the late one left a new pause process of the user on the node (one in ~6 suites).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from harness.neighbour import account
from podman_support import need_podman, rootless_leftovers

from dask_hpc.batch.runtimes import PODMAN_REMOVE

# One after another with the jobs of the second user: the check reads all the user's processes.
pytestmark = pytest.mark.xdist_group("tests/containers/test_podman_hpc.py")

LATE_PODMAN = """\
#!/bin/bash
# conmon's cleanup, late: a podman of the same run files once the pause process PID has ended
for _ in $(seq 30); do
  { read -r _ _ state _ </proc/"$1"/stat; } 2>/dev/null && [ "$state" != Z ] || break
  sleep 0.1
done
echo LATE
exec /usr/bin/podman --root "$TMPDIR/graph" --runroot "$TMPDIR/run" unshare true
"""

JOB = """\
run=$(mktemp -d /tmp/dask-hpc-podman_XXXXXX)
TMPDIR=$run /usr/bin/podman --root "$run/graph" --runroot "$run/run" unshare true 2>/dev/null
pause=$(cat "$run"/podman-run-*/libpod/tmp/pause.pid)
TMPDIR=$run "$1" "$pause" &
dask_hpc_podman_end "$run"
echo "ENDED $run"
wait
"""


def test_a_late_podman_of_the_run_files_leaves_no_pause_process() -> None:
    """A second user's run files: its pause process, a podman of those run files that starts
    late; ``dask_hpc_podman_end`` returns once neither is left, no pause process of the user on
    the node (nor podman's default directories)."""
    need_podman()
    user = account()
    bindir = Path(tempfile.mkdtemp(prefix="dask-hpc-late_", dir="/tmp"))  # the user reaches it
    bindir.chmod(0o755)
    late = bindir / "podman"  # its command name podman, as conmon's cleanup
    late.write_text(LATE_PODMAN)
    late.chmod(0o755)
    home = bindir / "home"  # podman's configuration and lock directories
    home.mkdir(mode=0o700)
    os.chown(home, user.pw_uid, user.pw_gid)
    assert rootless_leftovers(user.pw_uid) == []
    argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    script = f"{PODMAN_REMOVE}\n{JOB}"
    t0 = time.monotonic()
    ran = subprocess.run(
        [*argv, "bash", "-c", script, "job", str(late)],
        capture_output=True, text=True, cwd="/", timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )  # fmt: skip
    took = time.monotonic() - t0
    run = ran.stdout.partition("ENDED ")[2].strip()
    try:
        assert ran.returncode == 0 and run.startswith("/tmp/dask-hpc-podman_"), ran
        assert "LATE" in ran.stdout and "Error" not in ran.stderr, ran  # the late podman ran
        assert rootless_leftovers(user.pw_uid) == []
        assert took < 30, took  # it waited for the late podman (3 s), not for its timeout
    finally:
        shutil.rmtree(bindir)
        if run.startswith("/tmp/dask-hpc-podman_"):
            shutil.rmtree(run, ignore_errors=True)
