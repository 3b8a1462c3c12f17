"""Addresses the owner is shown are the owner's: the tunnel, JupyterLab's port, its kernels.

Before (85c333f), as the other user of the node:
- the printed tunnel forwarded to ``localhost:PORT``; where ``localhost`` is also ``::1``
  (Debian's default /etc/hosts), sshd connected there first, where the other user listened on
  the same ports: they received ``/status?token=`` and ``/lab?token=`` through the owner's own
  tunnel (tested with a real sshd whose /etc/hosts is Debian's);
- JupyterLab's port was found by bind-and-close, put on its command line, and "up" was any
  listener there: the other user, watching /proc, bound it first and the owner's links pointed
  at their listener, with the token;
- JupyterLab's kernels started as ``python -m ipykernel_launcher`` in the notebook's directory:
  the other user's ``ipykernel_launcher.py`` there ran as the owner.
"""

from __future__ import annotations

import asyncio
import json
import re
import select
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from harness.neighbour import Neighbour, stopped
from harness.sshd import sshd
from harness.waiting import free_ports, wait_for
from jobs.background import Background
from jupyter_support import execute, http
from support import cluster_links, printed_scheduler_file, start_cluster

pytestmark = pytest.mark.timeout(300)
QUIET = ["--dashboard-address", "127.0.0.1:0", "--timeout", "90"]


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def listen_and_record(stop_fd: int, host: str, ports: list[int]) -> dict[int, str]:
    """As the other user: listen on ``host`` at ``ports`` until stopped; what each received."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listeners = {}
    for port in ports:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind((host, port))
        sock.listen()
        sock.setblocking(False)
        listeners[sock.fileno()] = (port, sock)
    received: dict[int, str] = {}
    while not stopped(stop_fd, 0.0):
        ready, _, _ = select.select(list(listeners), [], [], 0.05)
        for fd in ready:
            port, sock = listeners[fd]
            conn, _ = sock.accept()
            conn.settimeout(2)
            try:
                received[port] = received.get(port, "") + conn.recv(4096).decode(errors="replace")
            except OSError:
                received.setdefault(port, "")
            conn.close()
    return received


def ready_cluster(env: dict[str, str], cwd: Path, tmp_path: Path) -> tuple[Background, dict]:
    """The owner's ``start-cluster --jupyter`` in ``cwd``, ready; its links (with tokens)."""
    run = Background([*start_cluster(), "cpu", "1", "--jupyter", *QUIET], env, tmp_path, cwd=cwd)
    run.wait_text("Dask cluster ready", 120)
    return run, cluster_links(printed_scheduler_file(run.stderr), env)


def end(run: Background) -> None:
    run.signal(signal.SIGTERM)
    assert run.wait(60) == 128 + signal.SIGTERM, run.output()


PLANTED = "import os, pathlib\npathlib.Path({marks!r}, {name!r}).touch()\n"


def plant_kernel_modules(directory: str) -> None:
    """As the other user: what a kernel started in ``directory`` would import first."""
    marks = Path(directory, "marks")
    marks.mkdir(mode=0o777)
    for name in ("ipykernel_launcher", "numpy", "colorsys"):
        Path(directory, f"{name}.py").write_text(PLANTED.format(marks=str(marks), name=name))


KERNEL_CODE = """
import colorsys, json, sys, numpy
print("PATHS", json.dumps([numpy.__file__, colorsys.__file__, sys.path]))
"""


def test_kernels_never_load_what_was_planted_in_the_notebooks_directory(
    neighbour: Neighbour, owner_env: dict[str, str], project: Path, tmp_path: Path
) -> None:
    neighbour.run(plant_kernel_modules, str(project))
    run, links = ready_cluster(owner_env, project, tmp_path)
    match = re.fullmatch(r"http://[\w.]+:(\d+)/lab\?token=(\w+)", links["jupyterlab"])
    assert match, links
    port, token = int(match.group(1)), match.group(2)
    status, body = http(f"http://127.0.0.1:{port}/api/kernels", "POST", token)
    assert status == 201, body
    output = asyncio.run(execute(port, json.loads(body)["id"], token, KERNEL_CODE))
    numpy_file, colorsys_file, path = json.loads(output.split("PATHS ", 1)[1])
    assert sorted(p.name for p in (project / "marks").iterdir()) == [], output
    assert not numpy_file.startswith(str(project)) and not colorsys_file.startswith(str(project))
    assert str(project) not in path and "" not in path, path
    end(run)


def test_the_printed_tunnel_reaches_the_owner_not_a_listener_on_ipv6_loopback(
    neighbour: Neighbour, owner_env: dict[str, str], tmp_path: Path
) -> None:
    """The tunnel as printed, through a real sshd that resolves ``localhost`` to ``::1``
    first (Debian's /etc/hosts), while the other user listens on ``[::1]`` at the owner's
    dashboard and JupyterLab ports."""
    env = {**owner_env, "SSH_CONNECTION": "10.0.0.9 50022 10.0.0.1 22"}
    with sshd(tmp_path / "sshd") as server:
        assert server.resolve("localhost")[0] == "::1"  # as on Debian: the attack's premise
        run, links = ready_cluster(env, tmp_path, tmp_path)
        tunnel = next(ln.strip() for ln in run.stderr.splitlines() if ln.strip().startswith("ssh"))
        # [BIND:]PORT:HOST:PORT, as printed; PORT is the node's port too
        forwards = [f.split(":") for f in re.findall(r"-L (\S+)", tunnel)]
        ports = sorted(int(f[-1]) for f in forwards)
        assert {int(u.split(":")[2].split("/")[0]) for u in links.values()} == set(ports)
        # Here the node and the user's machine are one: the local ends move to free ports.
        local = dict(zip(ports, free_ports(len(ports)), strict=True))
        words = tunnel.split()
        argv = ["ssh", "-N", *[w for w in words[2:-1] if not re.match(r"[\w.]*:?\d+:", w)]]
        argv = [w for w in argv if w != "-L"]
        for forward in forwards:
            argv += ["-L", ":".join([*forward[:-3], str(local[int(forward[-1])]), *forward[-2:]])]
        with neighbour.meanwhile(listen_and_record, "::1", ports) as stop:
            wait_for(lambda: all(listening("::1", p) for p in ports), 30, what="[::1] listeners")
            client = server.ssh([*argv, "root@127.0.0.1"])
            try:
                def forwarding() -> bool:
                    assert client.poll() is None, client.stderr.read().decode()
                    return all(_open(("127.0.0.1", p)) for p in local.values())

                wait_for(forwarding, 30, what="the tunnel")
                for name, url in links.items():
                    port = int(url.split(":")[2].split("/")[0])
                    path = url.split(str(port), 1)[1]
                    status, _ = http(f"http://127.0.0.1:{local[port]}{path}")
                    assert status in (200, 302), (name, status)
            finally:
                client.terminate()
                client.wait(30)
            received = stop()
    assert received == {}, f"the other user received through the owner's tunnel: {received}"
    assert all(f[:1] == ["127.0.0.1"] and f[2] == "127.0.0.1" for f in forwards), tunnel
    end(run)


def listening(host: str, port: int) -> bool:
    """Does anyone listen on ``host``:``port``? (Read from the kernel's tables, without
    connecting: a connection would be one more thing the other user records.)"""
    kind = "tcp6" if ":" in host else "tcp4"
    return any(c.status == psutil.CONN_LISTEN and tuple(c.laddr)[:2] == (host, port)
               for c in psutil.net_connections(kind))


def _open(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=2).close()
        return True
    except OSError:
        return False


def test_a_tunnel_hop_whose_port_another_user_holds_stops(
    neighbour: Neighbour, tmp_path: Path
) -> None:
    """Each hop of the printed tunnel listens on the user's ports of a login node others use:
    with one of them held by another user, ``ExitOnForwardFailure`` ends the hop in one line,
    instead of forwarding what the hop before sends to the other user's listener."""
    from dask_hpc.running.banner import ssh_tunnel

    target = free_ports(1)[0]
    printed = ssh_tunnel((), "127.0.0.1", [(target, "127.0.0.1")]).split()
    assert "ExitOnForwardFailure=yes" in printed
    with sshd(tmp_path / "sshd") as server, neighbour.meanwhile(
        listen_and_record, "127.0.0.1", [target]
    ) as stop:
        wait_for(lambda: listening("127.0.0.1", target), 30, what="the other user's listener")
        argv = [w for w in printed if w != "-t"][:-1] + ["-N", "root@127.0.0.1"]
        client = server.ssh(argv)
        _, err = client.communicate(timeout=60)
        assert client.returncode != 0
        assert b"forwarding" in err.lower(), err
        assert stop() == {}


def descends_from(pid: int, ancestor: int) -> bool:
    """Is ``pid`` a descendant of ``ancestor``? (/proc/PID/stat, readable by every user.)"""
    for _ in range(64):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def claim_jupyter_ports(stop_fd: int, owner: int) -> dict[str, object]:
    """As the other user: bind every port a ``jupyter lab`` command line of the owner's
    cluster (a descendant of ``owner``) names, the moment it appears in /proc, as the red
    team did; what each port received."""
    held: dict[int, socket.socket] = {}
    received: dict[int, str] = {}
    while not stopped(stop_fd, 0.0):
        for pid in psutil.pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if not any(a.startswith(b"--ServerApp.port=") for a in cmdline):
                continue
            if not descends_from(pid, owner):
                continue
            for arg in cmdline:
                if arg.startswith(b"--ServerApp.port="):
                    port = int(arg.split(b"=")[1])
                    if port and port not in held:
                        sock = socket.socket()
                        try:
                            sock.bind(("127.0.0.1", port))
                        except OSError:
                            sock.close()
                            continue
                        sock.listen()
                        sock.setblocking(False)
                        held[port] = sock
        for port, sock in held.items():
            try:
                conn, _ = sock.accept()
            except BlockingIOError:
                continue
            conn.settimeout(2)
            try:
                received[port] = conn.recv(4096).decode(errors="replace")
            except OSError:
                received[port] = ""
            conn.close()
        time.sleep(0.005)  # a tight loop, as an attacker's: polling, not waiting on anything
    return {"held": sorted(held), "received": received}


def test_a_jupyterlab_port_taken_first_is_never_linked(
    neighbour: Neighbour, owner_env: dict[str, str], tmp_path: Path
) -> None:
    run = Background([*start_cluster(), "cpu", "1", "--jupyter", *QUIET], owner_env, tmp_path)
    with neighbour.meanwhile(claim_jupyter_ports, run.proc.pid) as stop:
        run.wait_text("Dask cluster ready", 150)
        links = cluster_links(printed_scheduler_file(run.stderr), owner_env)
        theirs = stop()
    assert theirs["received"] == {}, theirs
    if "jupyterlab" in links:
        port = int(links["jupyterlab"].split(":")[2].split("/")[0])
        assert port not in theirs["held"], (links, theirs)
        owners = [c.pid for c in psutil.net_connections("tcp4")
                  if c.status == psutil.CONN_LISTEN and tuple(c.laddr) == ("127.0.0.1", port)]
        assert owners and all(psutil.Process(p).uids().real == 0 for p in owners), owners
    else:
        lines = [ln for ln in run.stderr.splitlines() if "JupyterLab did not start" in ln]
        assert len(lines) == 1, run.stderr
    assert theirs["held"], "the other user never saw a JupyterLab command line"
    end(run)
