"""Talking to JupyterLab as a browser at the end of the ssh tunnel does (importable as
``jupyter_support``): HTTP over JupyterLab's Unix socket without following redirects, code run
in a kernel over Jupyter's websocket, and what start-cluster printed about it.

The browser's requests reach the socket through ssh (``-L 127.0.0.1:PORT:SOCKET``): they carry
``Host: 127.0.0.1:PORT``; these do the same, over the socket itself.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import socket
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

KERNEL_CODE = """
from distributed import Client
client = Client(timeout=30)
print("KERNEL", client.submit(lambda x: x + 1, 41).result(), client.scheduler.address)
client.close()
"""


@dataclass(frozen=True)
class Lab:
    """JupyterLab as start-cluster announced it: the link's port (the user's end of the
    tunnel), the token, and the Unix socket the tunnel's last hop forwards to."""

    port: int
    token: str
    socket: Path


def announced(link: str, stderr: str) -> Lab:
    """The link (from ``hpc-cluster links``) and the socket in the printed tunnel command."""
    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/lab\?token=(\w+)", link)
    assert match, link
    port = int(match.group(1))
    forwards = re.findall(rf"-L 127\.0\.0\.1:{port}:(\S+)", stderr)
    assert forwards, f"no tunnel to JupyterLab's port {port} printed:\n{stderr}"
    path = Path(forwards[-1])  # the last hop forwards to the socket
    assert path.is_absolute(), forwards
    return Lab(port, match.group(2), path)


class UnixHTTPConnection(http.client.HTTPConnection):
    """``http.client`` over a Unix socket."""

    def __init__(self, path: Path, host: str, timeout: float = 30) -> None:
        super().__init__(host, timeout=timeout)
        self.socket_path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def lab_request(
    lab: Lab, path: str, method: str = "GET", token: str | None = None, data: dict | None = None
) -> tuple[int, str]:
    """(status, body) of one request to JupyterLab over its socket, no redirects followed."""
    conn = UnixHTTPConnection(lab.socket, f"127.0.0.1:{lab.port}")
    headers = {"Authorization": f"token {token}"} if token else {}
    body = json.dumps(data or {}).encode() if method == "POST" else None
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def http(url: str, method: str = "GET", token: str | None = None) -> tuple[int, str]:
    """(status, body) of a request over TCP (the dashboard), no redirects followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def start_kernel(lab: Lab, notebook: str = "Untitled.ipynb") -> str:
    """A new kernel through JupyterLab's REST API as opening ``notebook`` (relative to the
    files root) does: a session, whose kernel jupyter-server starts in the notebook's
    directory. The kernel's id."""
    data = {"path": notebook, "type": "notebook", "name": "", "kernel": {"name": "python3"}}
    status, body = lab_request(lab, "/api/sessions", "POST", lab.token, data)
    assert status == 201, (status, body)
    return str(json.loads(body)["kernel"]["id"])


async def execute(lab: Lab, kernel: str, code: str, timeout: float = 60) -> str:
    """Run ``code`` in a kernel over Jupyter's websocket protocol; return its stdout."""
    from tornado.netutil import Resolver
    from tornado.websocket import websocket_connect

    class ToSocket(Resolver):
        async def resolve(self, host: str, port: int, family: int = 0) -> list:  # type: ignore[override]
            return [(socket.AF_UNIX, str(lab.socket))]

    url = f"ws://127.0.0.1:{lab.port}/api/kernels/{kernel}/channels?token={lab.token}"
    ws = await websocket_connect(url, resolver=ToSocket())
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "test"}
    header.update(session=uuid.uuid4().hex, date="", version="5.3")
    content = {"code": code, "silent": False, "store_history": False, "allow_stdin": False}
    content.update(user_expressions={}, stop_on_error=True)
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    ws.write_message(json.dumps({**message, "channel": "shell"}))
    out = []

    async def read() -> None:
        # Done when both have come: the shell's execute_reply and iopub's status idle. The
        # reply may come before the output (two channels, no order between them): reading to
        # the reply alone once returned "" in CI.
        replied = idle = False
        while not (replied and idle):
            raw = await ws.read_message()
            assert raw is not None, "the kernel's websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                out.append("\n".join(msg["content"]["traceback"]))
            elif kind == "execute_reply":
                replied = True
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True

    try:
        await asyncio.wait_for(read(), timeout)
    finally:
        ws.close()
    return "".join(out)


JUPYTER_PROGRAMS = {
    *("jupyter", "jupyter-lab", "dask_hpc.running.jupyter_lab"),  # JupyterLab
    *("ipykernel_launcher", "dask_hpc.running.jupyter_kernel"),  # kernels
}


def jupyter_processes(root: int) -> list[psutil.Process]:
    """JupyterLab and its kernels among the descendants of ``root`` (a word of the command
    line names one of ``JUPYTER_PROGRAMS``: the rank's ``--jupyter`` and paths do not)."""
    found = []
    for proc in psutil.Process(root).children(recursive=True):
        try:
            words = {os.path.basename(a) for a in proc.cmdline()}
        except psutil.Error:
            continue
        if words & JUPYTER_PROGRAMS:
            found.append(proc)
    return found


def tcp_listeners(procs: list[psutil.Process]) -> dict[int, list[str]]:
    """{pid: ["ADDRESS:PORT", ...]} of the TCP/UDP sockets each of ``procs`` listens on."""
    found: dict[int, list[str]] = {}
    for proc in procs:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        listening = [
            f"{c.laddr.ip}:{c.laddr.port}"
            for c in conns
            if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and c.laddr)
        ]
        if listening:
            found[proc.pid] = listening
    return found
