"""Rank directories that killed ranks left behind (dask_hpc.guard.left_behind).

A SIGKILLed rank cannot remove its private local directory (and what its workers spilled
there); the next rank of the same user on the node removes it, and nothing that is not such a
directory: not one a living rank holds, not another user's, not one open to others, not a link.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fault_support import OPTS, all_gone, faulty
from harness.neighbour import account
from harness.procs import kill_tree
from harness.waiting import wait_for
from jobs.background import Background
from support import start_cluster

from dask_hpc.guard import left_behind


def rank_directory(base: Path, name: str, mode: int = 0o700) -> Path:
    """A rank's directory as a rank that has ended leaves it (``left_behind.hold``'s lock
    released)."""
    directory = base / name
    directory.mkdir()
    directory.chmod(mode)
    (directory / "spilled").write_bytes(b"x" * 1024)
    fd = left_behind.hold(directory)
    assert fd is not None
    os.close(fd)
    return directory


def test_only_the_users_own_unheld_rank_directories_are_removed(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o1777)
    base.chmod(0o1777)
    ended = rank_directory(base, "dask-hpc-ended")
    alive = base / "dask-hpc-alive"  # its rank (here: this process) still runs
    alive.mkdir(mode=0o700)
    lock = left_behind.hold(alive)
    assert lock is not None
    being_made = base / "dask-hpc-new"  # mkdtemp'd, no .held yet
    being_made.mkdir(mode=0o700)
    open_to_others = rank_directory(base, "dask-hpc-open", mode=0o755)
    theirs = rank_directory(base, "dask-hpc-theirs")
    other = account()
    for path in (theirs, theirs / "spilled", theirs / left_behind.HELD):
        os.chown(path, other.pw_uid, other.pw_gid)
    elsewhere = rank_directory(tmp_path, "dask-hpc-elsewhere")
    (base / "dask-hpc-link").symlink_to(elsewhere)
    not_ours_by_name = rank_directory(base, "scratch")

    removed = left_behind.remove_left_behind(base)

    assert removed == [ended]
    assert not os.path.lexists(ended)
    for kept in (alive, being_made, open_to_others, theirs, elsewhere, not_ours_by_name):
        assert kept.is_dir(), kept
    assert (base / "dask-hpc-link").is_symlink() and (elsewhere / "spilled").is_file()
    assert left_behind.remove_left_behind(base) == []  # nothing more to remove
    os.close(lock)  # its rank ends without removing it (SIGKILLed)
    assert left_behind.remove_left_behind(base) == [alive]


def test_a_base_that_cannot_be_read_removes_nothing(tmp_path: Path) -> None:
    assert left_behind.remove_left_behind(tmp_path / "missing") == []


def test_a_killed_ranks_directory_is_removed_by_the_next_rank(
    cluster_env: dict[str, str], tmp_path: Path, run_cmd
) -> None:
    base = tmp_path / "local"
    base.mkdir(mode=0o700)
    argv = [*start_cluster(), "cpu", "1", *OPTS, "--local-directory", str(base), "--"]
    hold = tmp_path / "hold.json"
    run = Background([*argv, *faulty("hold", str(hold))], cluster_env, tmp_path)
    held = json.loads(wait_for(lambda: hold.exists() and hold.read_text(), 60, what="COMMAND"))
    (left,) = base.glob("dask-hpc-*")
    kill_tree(held["rank_pid"])  # the rank and all it started, as the OOM killer may
    run.wait(30)
    all_gone()
    assert (left / left_behind.HELD).is_file()  # the killed rank could not remove it

    second = run_cmd([*argv, "true"], env=cluster_env, timeout=120)

    assert second.returncode == 0, second.stderr
    assert f"removed {left}: a rank of yours that was killed left it there" in second.stderr
    assert list(base.iterdir()) == []  # the old one removed, the new one removed at its end


def test_a_file_system_without_flock_holds_nothing_and_removes_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    """Where ``flock`` fails (a Lustre mounted without it) the rank starts as before: no
    ``.held``, so no later rank takes its directory as left behind."""
    directory = tmp_path / "dask-hpc-nolock"
    directory.mkdir(mode=0o700)

    def no_flock(fd: int, operation: int) -> None:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(left_behind.fcntl, "flock", no_flock)
    assert left_behind.hold(directory) is None
    assert list(directory.iterdir()) == []
    assert left_behind.remove_left_behind(tmp_path) == []
    assert directory.is_dir()
