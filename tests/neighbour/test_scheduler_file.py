"""The scheduler file in a shared directory: what another user plants there, and what it
writes for the owner to read.

Before: rank 0 wrote ``.NAME.PID.tmp`` (``O_CREAT|O_TRUNC``, no ``O_EXCL``) and renamed it, so
a file the other user planted under that name became the scheduler file (theirs, 0666, with
the dashboard's and the roll call's tokens), a symbolic link made the owner overwrite its own
file, and a FIFO hung the start; ``--join`` read any file, so one the other user wrote (its
address, its CA and certificate) connected the owner's workers to its scheduler, which then
ran code as the owner. Now the file is written under a random name, and a scheduler file is
read only if the reader could have written it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from harness.neighbour import Neighbour, stopped
from harness.waiting import free_ports, wait_for
from jobs.background import Background
from neighbour_support import one_error_line

from dask_hpc.guard import security


def listen(stop_fd: int, port: int) -> int:
    """As the other user: a scheduler's port; how many connections reached it."""
    server = socket.create_server(("127.0.0.1", port))
    accepted = 0
    while not stopped(stop_fd):
        ready, _, _ = select.select([server, stop_fd], [], [], 1.0)
        if server in ready:
            conn, _ = server.accept()
            accepted += 1
            conn.close()
    server.close()
    return accepted


def write_as(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        if os.fstat(f.fileno()).st_uid == os.geteuid():  # not the owner's 0666 file
            os.fchmod(f.fileno(), mode)


def scheduler_file_text(port: int, tls_dir: Path) -> bytes:
    """A scheduler file as rank 0 writes one, naming another scheduler and its certificates."""
    tls = security.TlsFiles.in_directory(tls_dir)
    return json.dumps({
        "type": "Scheduler",
        "address": f"tls://127.0.0.1:{port}",
        "services": {},
        "dask_hpc": {"host": "x", "launch_id": "x", "roster": None, "token": None,
                     "tls": {"ca": str(tls.ca), "cert": str(tls.cert), "key": str(tls.key)}},
    }).encode()


@pytest.fixture
def foreign_tls(tmp_path: Path, neighbour: Neighbour, sticky: Path) -> Path:
    """The other user's own CA, certificate and key, in its own directory."""
    made = tmp_path / "made"
    made.mkdir(mode=0o700)
    files = security.create(made, "the-other-users-cluster")
    theirs = sticky / "their-tls"
    contents = {
        p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in (files.ca, files.cert, files.key)
    }

    def copy() -> None:
        theirs.mkdir(mode=0o755)
        for name, (data, mode) in contents.items():
            write_as(str(theirs / name), data, mode)

    neighbour.run(copy)
    return theirs


def join_cases(sticky: Path, project: Path, foreign_tls: Path, port: int) -> dict:
    """name -> (path, who writes it, what the owner must say)."""
    text = scheduler_file_text(port, foreign_tls)
    return {
        "theirs": (sticky / "theirs.json", "other", "belongs to dask-hpc-intruder"),
        "the owner's, writable by others": (
            sticky / "open.json", "owner-0666", "can be written by other users"),
        "their symbolic link": (
            sticky / "link.json", "link", "is a symbolic link of dask-hpc-intruder's"),
        "the owner's, in a directory others can write": (
            project / "owner.json", "owner", "is not sticky"),
        "the owner's, naming their certificates": (
            sticky / "owner-tls.json", "owner", "belongs to dask-hpc-intruder"),
    }, text


def place(kind: str, path: Path, text: bytes, neighbour: Neighbour, sticky: Path) -> None:
    if kind == "other":
        neighbour.run(write_as, str(path), text, 0o644)
    elif kind == "link":
        neighbour.run(write_as, str(sticky / "target.json"), text, 0o644)
        neighbour.run(lambda: path.symlink_to(sticky / "target.json"))
    else:
        write_as(str(path), text, 0o600)
        if kind == "owner-0666":
            os.chmod(path, 0o666)  # a umask's mistake; the other user then rewrote it
            neighbour.run(write_as, str(path), text, 0o666)


def test_join_reads_only_the_owners_scheduler_file(
    run_owner, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, project: Path,
    foreign_tls: Path,
) -> None:
    """``--join`` a scheduler file the other user could write, under each launcher: refused in
    one line, and nothing reached the scheduler it named."""
    port = free_ports(1)[0]
    cases, text = join_cases(sticky, project, foreign_tls, port)
    with neighbour.meanwhile(listen, port) as stop:
        for path, kind, problem in cases.values():
            place(kind, path, text, neighbour, sticky)
            result = run_owner(["--join", str(path)], owner_env, timeout=60)
            one_error_line(result, str(path.parent), problem)  # srun: 143 for the rank it killed
        assert stop() == 0, "the owner's workers connected to the other user's scheduler"


def test_connect_attach_and_hpc_cluster_read_only_the_owners_file(
    run_cmd, neighbour: Neighbour, sticky: Path, project: Path, foreign_tls: Path,
    cluster_env: dict[str, str],
) -> None:
    from dask_hpc import connect
    from dask_hpc.elastic import HPCCluster
    from dask_hpc.errors import UsageError

    port = free_ports(1)[0]
    cases, text = join_cases(sticky, project, foreign_tls, port)
    with neighbour.meanwhile(listen, port) as stop:
        for path, kind, problem in cases.values():
            place(kind, path, text, neighbour, sticky)
            with pytest.raises(UsageError, match=problem):
                connect(path, timeout=5)
            with pytest.raises(UsageError, match=problem):
                HPCCluster.attach(path)
            for command in ("status", "links", "down"):
                result = run_cmd(["hpc-cluster", command, str(path)], env=cluster_env)
                assert result.returncode == 2, result.stderr
                assert result.stderr.count("\n") == 1 and problem in result.stderr, result.stderr
        assert stop() == 0, "the owner connected to the other user's scheduler"


PLANTS: dict[str, Callable[[str, str], None]] = {
    "a file": lambda path, _: write_as(path, b"", 0o666),
    "a FIFO": lambda path, _: os.mkfifo(path, 0o666),
    "a symbolic link": lambda path, target: os.symlink(target, path),
}


@pytest.mark.parametrize("what", sorted(PLANTS))
def test_a_planted_temporary_name_does_not_become_the_scheduler_file(
    what: str, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, tmp_path: Path
) -> None:
    """The other user, seeing the rank's pid, plants the name rank 0 wrote the file under
    (``.NAME.PID.tmp``) before rank 0 writes it; the rank is started through ``exec`` so its
    pid is known."""
    owners_file = tmp_path / "owners-notes.txt"  # what a symbolic link aims at
    owners_file.write_text("the owner's own\n")
    pidfile, go = tmp_path / "pid", tmp_path / "go"
    os.mkfifo(go)
    scheduler_file = sticky / "s.json"
    start = (
        f'echo $$ > {pidfile}; read _ < {go}; exec start-cluster cpu 1 --scheduler-file '
        f"{scheduler_file} --dashboard-address 127.0.0.1:0 --timeout 60"
    )
    run = Background(["sh", "-c", start], owner_env, tmp_path)
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 30, what="its pid")
        planted = sticky / f".s.json.{pidfile.read_text().strip()}.tmp"
        neighbour.run(PLANTS[what], str(planted), str(owners_file))
        with open(go, "w") as f:
            f.write("go\n")
        run.wait_text("Dask cluster ready", 60)
        info = scheduler_file.lstat()
        assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid(), what
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert owners_file.read_text() == "the owner's own\n", "written through the link"
        assert planted.lstat().st_uid != os.geteuid(), "the planted name was used"

        def read_it() -> str:
            try:
                return scheduler_file.read_text()
            except PermissionError:
                return "refused"

        assert neighbour.run(read_it) == "refused"
        run.signal(signal.SIGTERM)
        assert run.wait(60) == 128 + signal.SIGTERM, run.output()
    finally:
        Background.kill_all()
