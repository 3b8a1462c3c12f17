"""Addresses the owner is shown are the owner's: the tunnel, JupyterLab's link, its kernels.

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

Before (00a0f72), JupyterLab still listened on TCP (127.0.0.1, a port its own process bound,
linked from its server file). Now it serves on a Unix socket only (0600, in a private 0700
directory), its kernels talk ZMQ over IPC, the link's port is the user's end of the tunnel
(``hpc.jupyter-port``), and the tunnel's last hop forwards it to the socket: no port of
JupyterLab's is on a command line or bound on the node, so the race for it is gone, and the
test of it became one that the other user holding the configured port changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shlex
import signal
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
from harness.neighbour import Neighbour, stopped
from harness.sshd import sshd
from harness.waiting import free_ports, wait_for
from jobs.background import Background
from jupyter_support import (
    KERNEL_CODE,
    announced,
    execute,
    http,
    jupyter_processes,
    lab_request,
    start_kernel,
    tcp_listeners,
)
from support import cluster_links, printed_scheduler_file, start_cluster

pytestmark = pytest.mark.timeout(300)
QUIET = ["--dashboard-address", "127.0.0.1:0", "--timeout", "90"]


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def listen_and_record(stop_fd: int, host: str, ports: list[int]) -> dict[int, str]:
    """As the other user: listen on ``host`` at ``ports`` until stopped; what each received
    (a connection that sent nothing is recorded too, as ``""``)."""
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


def listening(host: str, port: int) -> bool:
    """Does anyone listen on ``host``:``port``? (Read from the kernel's tables, without
    connecting: a connection would be one more thing the other user records.)"""
    kind = "tcp6" if ":" in host else "tcp4"
    return any(
        c.status == psutil.CONN_LISTEN and tuple(c.laddr)[:2] == (host, port)
        for c in psutil.net_connections(kind)
    )


def _open(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=2).close()
        return True
    except OSError:
        return False


def assert_private_socket(path: str) -> None:
    """``path`` is an absolute path to a Unix socket in a 0700 directory of the owner's."""
    assert path.startswith("/"), path
    st = os.stat(Path(path).parent)
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700, (path, oct(st.st_mode))
    assert stat.S_ISSOCK(os.stat(path).st_mode), path


PLANTED = "import os, pathlib\npathlib.Path({marks!r}, {name!r}).touch()\n"


def plant_kernel_modules(directory: str) -> None:
    """As the other user: what a kernel started in ``directory`` would import first."""
    marks = Path(directory, "marks")
    marks.mkdir(mode=0o777)
    for name in ("ipykernel_launcher", "numpy", "colorsys"):
        Path(directory, f"{name}.py").write_text(PLANTED.format(marks=str(marks), name=name))


PATHS_CODE = """
import colorsys, json, os, sys, numpy
print("PATHS", json.dumps([os.getcwd(), numpy.__file__, colorsys.__file__, sys.path]))
"""


def test_kernels_never_load_what_was_planted_in_the_notebooks_directory(
    neighbour: Neighbour, owner_env: dict[str, str], project: Path, tmp_path: Path
) -> None:
    """A kernel of a notebook in the project directory (JupyterLab's files root, where the
    owner started) runs there, and imports nothing the other user planted there."""
    neighbour.run(plant_kernel_modules, str(project))
    run, links = ready_cluster(owner_env, project, tmp_path)
    lab = announced(links["jupyterlab"], run.stderr)
    kernel = start_kernel(lab, "Untitled.ipynb")  # a notebook in the project directory
    output = asyncio.run(execute(lab, kernel, PATHS_CODE))
    assert "PATHS " in output, output
    cwd, numpy_file, colorsys_file, path = json.loads(output.split("PATHS ", 1)[1])
    assert cwd == str(project), cwd  # the premise: the kernel runs among the planted modules
    assert sorted(p.name for p in (project / "marks").iterdir()) == [], output
    assert not numpy_file.startswith(str(project)) and not colorsys_file.startswith(str(project))
    assert str(project) not in path and "" not in path, path
    end(run)


def forwards_of(tunnel: str) -> tuple[list[str], list[list[str]]]:
    """The printed tunnel (one hop: the node's) as (its options but ``-t``, ``-L`` and the
    destination; its forwards, each split at ``:``: BIND PORT HOST PORT, or BIND PORT SOCKET)."""
    words = shlex.split(tunnel)
    assert words[0] == "ssh" and tunnel.count(" ssh ") == 0, tunnel
    options: list[str] = []
    forwards: list[list[str]] = []
    args = iter(words[1:-1])
    for word in args:
        if word == "-L":
            forwards.append(next(args).split(":"))
        elif word != "-t":
            options.append(word)
    assert forwards and all(len(f) in (3, 4) for f in forwards), tunnel
    return options, forwards


def test_the_printed_tunnel_reaches_the_owner_not_a_listener_on_ipv6_loopback(
    neighbour: Neighbour, owner_env: dict[str, str], tmp_path: Path
) -> None:
    """The tunnel as printed, through a real sshd that resolves ``localhost`` to ``::1``
    first (Debian's /etc/hosts), while the other user listens on ``[::1]`` at the owner's
    dashboard and JupyterLab ports: the dashboard (TCP) and JupyterLab (its Unix socket) are
    reached through it, and the other user receives nothing."""
    lab_port = free_ports(1)[0]
    env = {
        **owner_env,
        "SSH_CONNECTION": "10.0.0.9 50022 10.0.0.1 22",
        "DASK_HPC__JUPYTER_PORT": str(lab_port),
    }
    with sshd(tmp_path / "sshd") as server:
        assert server.resolve("localhost")[0] == "::1"  # as on Debian: the attack's premise
        run, links = ready_cluster(env, tmp_path, tmp_path)
        tunnel = next(ln.strip() for ln in run.stderr.splitlines() if ln.strip().startswith("ssh"))
        options, forwards = forwards_of(tunnel)
        ports = sorted(int(f[1]) for f in forwards)  # the user's ends, as printed
        assert {urlsplit(u).port for u in links.values()} == set(ports), (links, tunnel)
        assert urlsplit(links["jupyterlab"]).port == lab_port, links
        # Here the node and the user's machine are one: the local ends move to free ports.
        local = dict(zip(ports, free_ports(len(ports)), strict=True))
        argv = ["ssh", "-N", *options]
        for forward in forwards:
            argv += ["-L", ":".join([forward[0], str(local[int(forward[1])]), *forward[2:]])]
        with neighbour.meanwhile(listen_and_record, "::1", ports) as stop:
            wait_for(lambda: all(listening("::1", p) for p in ports), 30, what="[::1] listeners")
            client = server.ssh([*argv, "root@127.0.0.1"])
            try:

                def forwarding() -> bool:
                    assert client.poll() is None, client.stderr.read().decode()
                    return all(_open(("127.0.0.1", p)) for p in local.values())

                wait_for(forwarding, 30, what="the tunnel")
                for name, url in links.items():
                    parts = urlsplit(url)
                    status, _ = http(
                        f"http://127.0.0.1:{local[parts.port]}{parts.path}?{parts.query}"
                    )
                    assert status in (200, 302), (name, status)
            finally:
                client.terminate()
                client.wait(30)
            received = stop()
    assert received == {}, f"the other user received through the owner's tunnel: {received}"
    assert all(f[0] == "127.0.0.1" for f in forwards), tunnel  # every hop binds loopback
    tcp = [f for f in forwards if len(f) == 4]
    unix = [f for f in forwards if len(f) == 3]
    assert tcp and all(f[2] == "127.0.0.1" and f[1] == f[3] for f in tcp), tunnel
    assert [int(f[1]) for f in unix] == [lab_port], tunnel  # JupyterLab's: its socket
    assert_private_socket(unix[0][2])
    assert Path(unix[0][2]) == announced(links["jupyterlab"], run.stderr).socket
    end(run)


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
    with (
        sshd(tmp_path / "sshd") as server,
        neighbour.meanwhile(listen_and_record, "127.0.0.1", [target]) as stop,
    ):
        wait_for(lambda: listening("127.0.0.1", target), 30, what="the other user's listener")
        argv = [w for w in printed if w != "-t"][:-1] + ["-N", "root@127.0.0.1"]
        client = server.ssh(argv)
        _, err = client.communicate(timeout=60)
        assert client.returncode != 0
        assert b"forwarding" in err.lower(), err
        assert stop() == {}


def free_run(count: int) -> list[int]:
    """``count`` consecutive TCP ports that were free on 127.0.0.1 a moment ago."""
    for _ in range(50):
        base = free_ports(1)[0]
        socks = []
        try:
            for port in range(base, min(base + count, 65536)):
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", port))
            if len(socks) == count:
                return list(range(base, base + count))
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    pytest.fail(f"no {count} consecutive free ports on 127.0.0.1 in 50 tries")


def test_the_jupyterlab_port_held_by_another_user_changes_nothing(
    neighbour: Neighbour, owner_env: dict[str, str], tmp_path: Path
) -> None:
    """The other user binds 127.0.0.1 at the configured ``hpc.jupyter-port`` and the four
    ports after it before the owner starts ``--jupyter``: JupyterLab starts anyway (it binds
    no TCP port), the link recorded is the user's end of the tunnel to its socket, a kernel
    reaches the cluster, and nothing of the owner's connects to the other user's listeners."""
    ports = free_run(5)
    env = {**owner_env, "DASK_HPC__JUPYTER_PORT": str(ports[0])}
    with neighbour.meanwhile(listen_and_record, "127.0.0.1", ports) as stop:
        wait_for(lambda: all(listening("127.0.0.1", p) for p in ports), 30, what="listeners")
        run, links = ready_cluster(env, tmp_path, tmp_path)
        assert "JupyterLab did not start" not in run.stderr, run.stderr
        lab = announced(links["jupyterlab"], run.stderr)  # http://127.0.0.1:PORT/lab?token=
        assert lab.port == ports[0], links
        assert_private_socket(str(lab.socket))
        tunnel = next(ln for ln in run.stderr.splitlines() if ln.strip().startswith("ssh"))
        assert f"-L 127.0.0.1:{ports[0]}:{lab.socket} " in tunnel, tunnel
        assert lab_request(lab, "/lab", token=lab.token)[0] == 200
        kernel = start_kernel(lab)
        output = asyncio.run(execute(lab, kernel, KERNEL_CODE))  # a bare Client()
        assert "KERNEL 42 tls://" in output, output
        assert tcp_listeners(jupyter_processes(run.proc.pid)) == {}, run.output()
        assert all(run.listening_on(p) == set() for p in ports)
        assert all(listening("127.0.0.1", p) for p in ports)  # still the other user's
        received = stop()
    assert received == {}, f"the owner's processes connected to the other user: {received}"
    end(run)
