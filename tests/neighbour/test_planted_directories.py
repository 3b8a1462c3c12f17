"""Directories another user of the node makes first, where the owner's cluster works.

Before: the default local directory was ``$TMPDIR/dask-hpc-<uid>`` (``mkdir(exist_ok=True)``,
no owner check) and the scheduler's Dask's shared ``$TMPDIR/dask-scratch-space``. A planted
``colorsys.py`` there ran as the owner on ``import colorsys`` in a task (the Nanny's scratch
space is on its worker's ``sys.path``), and the owner's files landed in the other user's
directories. Now each rank makes its own directory (``mkdtemp``) and a directory given by name
must be safe: these runs show the planted code never runs and nothing of the owner's lands in
the other user's directories, under each launcher.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.neighbour import Neighbour, stopped
from neighbour_support import neighbour_result, one_error_line, probe_command

# What the other user puts where the owner's cluster used to work.
PLANTED = "import os, pathlib\npathlib.Path({marks!r}, 'ran-as-%d' % os.getuid()).touch()\n"
FIXED_NAMES = ("dask-hpc-0", "dask-hpc-0/dask-scratch-space", "dask-scratch-space", "dask-workers")


def plant(tmpdir: str) -> None:
    """As the other user: world-writable directories under every name the owner used, each
    holding a ``colorsys.py`` that leaves a mark when imported."""
    marks = Path(tmpdir, "marks")
    marks.mkdir(mode=0o777)
    for name in FIXED_NAMES:
        directory = Path(tmpdir, name)
        directory.mkdir(mode=0o777)
        (directory / "colorsys.py").write_text(PLANTED.format(marks=str(marks)))


def swap_work_directories(stop_fd: int, tmpdir: str) -> list[str]:
    """As the other user, until stopped: every work directory Dask makes in a planted scratch
    space is renamed away and replaced by one holding the planted module (the parent is the
    other user's). Returns what it swapped."""
    marks = str(Path(tmpdir, "marks"))
    swapped: list[str] = []
    spaces = [Path(tmpdir, n) for n in FIXED_NAMES if n.endswith("dask-scratch-space")]
    while not stopped(stop_fd, 0.02):
        for space in spaces:
            for entry in space.iterdir():
                if entry.is_dir() and "-" in entry.name and not entry.name.startswith("."):
                    try:
                        entry.rename(space / f".{entry.name}")
                        entry.mkdir(mode=0o777)
                        (entry / "colorsys.py").write_text(PLANTED.format(marks=marks))
                        swapped.append(str(entry))
                    except OSError:
                        pass
    return swapped


def owners_files_in(root: Path) -> list[str]:
    """Paths under ``root`` that the owner (root) made: the owner's data in the other user's
    directories."""
    found = []
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory, name)
            if path.lstat().st_uid == os.geteuid():
                found.append(str(path))
    return found


def test_planted_working_directories_are_never_used(
    run_owner, launcher: str, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path
) -> None:
    neighbour.run(plant, str(sticky))
    with neighbour.meanwhile(swap_work_directories, str(sticky)) as stop:
        result = run_owner(probe_command(), owner_env)
        swapped = stop()
    assert result.returncode == 0, result.stderr
    out = neighbour_result(result.stdout)
    assert len(out["workers"]) == (1 if launcher == "local" else 2)
    for who in [*out["workers"].values(), out["scheduler"]]:
        assert who["colorsys"].startswith(os.path.dirname(os.__file__)), who  # the stdlib's
        directory = Path(who["directory"])
        assert directory.is_relative_to(sticky), who  # in $TMPDIR, as before
        private = directory.relative_to(sticky).parts[0]
        assert private.startswith("dask-hpc-") and private not in FIXED_NAMES, who
        assert (who["uid"], who["mode"] & 0o077) == (os.geteuid(), 0), who
    marks = list((sticky / "marks").iterdir())
    assert not marks, f"the other user's code ran as the owner: {marks}"
    assert not swapped, f"the other user swapped the owner's work directories: {swapped}"
    for name in FIXED_NAMES:
        assert not owners_files_in(sticky / name), f"the owner's files in the other's {name}"
    left = [p.name for p in sticky.iterdir() if p.name.startswith("dask-hpc-") and
            p.name not in FIXED_NAMES]
    assert not left, f"private directories left behind: {left}"


def test_a_local_directory_of_another_user_is_refused(
    run_cmd, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, project: Path
) -> None:
    """``--local-directory`` naming a directory the other user made, or a symbolic link it
    planted, or one in which it can replace entries (not sticky): one line, nothing started."""
    neighbour.run(lambda: Path(sticky, "planted").mkdir(mode=0o777))
    neighbour.run(lambda: Path(sticky, "link").symlink_to(sticky / "planted"))
    cases = {
        sticky / "planted": "belongs to dask-hpc-intruder",
        sticky / "link": "belongs to dask-hpc-intruder",  # followed: the directory it names
        project: "can be written by other users and is not sticky",
    }
    for directory, problem in cases.items():
        argv = ["start-cluster", "cpu", "1", "--local-directory", str(directory), "--", "true"]
        result = run_cmd(argv, env=owner_env, timeout=60)
        one_error_line(result, f"local directory {directory}", problem, "--local-directory")
        assert result.returncode == 2
    assert not owners_files_in(sticky) and not owners_files_in(project)


def test_a_symlink_for_the_cluster_directory_changes_nothing(
    run_cmd, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, tmp_path: Path
) -> None:
    """Before: ``prepare_directory`` chmod'ed 0700 whatever ``<stem>.dask-hpc`` named, then
    refused it: the other user's symbolic link chose which of the owner's directories."""
    owners = tmp_path / "owners-project"
    owners.mkdir(mode=0o755)
    neighbour.run(lambda: Path(sticky, "job.dask-hpc").symlink_to(owners))
    argv = ["start-cluster", "cpu", "1", "--scheduler-file", str(sticky / "job.json")]
    result = run_cmd([*argv, "--", "true"], env=owner_env, timeout=60)
    one_error_line(result, "cluster directory", "job.dask-hpc is a symbolic link")
    assert stat.S_IMODE(owners.stat().st_mode) == 0o755, "the owner's directory was chmod'ed"
    assert not list(owners.iterdir())


def test_a_stale_cluster_directory_of_another_user_is_refused(
    run_owner, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path
) -> None:
    """The cluster directory's name (here from ``--scheduler-file``; by default from the job's
    id) is taken by the other user's directory: every launcher refuses it in one line."""
    stale = sticky / "cluster.dask-hpc"
    neighbour.run(lambda: stale.mkdir(mode=0o777))
    result = run_owner(["--scheduler-file", str(sticky / "cluster.json"), "--", "true"], owner_env)
    one_error_line(result, f"cluster directory {stale}", "belongs to dask-hpc-intruder")
    assert not list(stale.iterdir()), "the owner wrote into the other user's directory"


def test_a_scheduler_directory_others_can_write_is_refused(
    run_cmd, owner_env: dict[str, str], project: Path
) -> None:
    """Not sticky, writable by others: they could rename the cluster's directory away and put
    theirs in its place. Refused before anything starts."""
    env = {**owner_env, "DASK_HPC__SCHEDULER_DIRECTORY": str(project)}
    result = run_cmd(["start-cluster", "cpu", "1", "--", "true"], env=env, timeout=60)
    one_error_line(result, f"scheduler directory {project}", "is not sticky", "--scheduler-file")
    assert not list(project.iterdir())
