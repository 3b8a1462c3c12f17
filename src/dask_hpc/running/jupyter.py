"""JupyterLab on the scheduler's node, for the owner only: loopback, a token, the cluster's env.

JupyterLab listens on 127.0.0.1 (never on all interfaces): the owner reaches it through the
printed ssh tunnel, and the token (passed in the environment, not on the command line where
``ps`` would show it) keeps other users of the node out. Its kernels inherit the cluster's
``DASK_SCHEDULER_ADDRESS`` and TLS settings, so a bare ``Client()`` in a notebook connects.
It dies with the rank that started it (SIGTERM on the rank's death).

Another user of the node can see the port on JupyterLab's command line and take it first. So
the port linked is the one JupyterLab says it serves on, in its server file in our private
runtime directory, once the kernel shows JupyterLab's own process listening there. The first
try is the configured port (``hpc.jupyter-port``, the next free one); a JupyterLab that could
not listen there is started again on port 0, a port the kernel picks that no command line
showed before it was taken; after ``TRIES`` one line says it did not start (the cluster goes
on without it, nothing is linked).

Its kernels run without the notebook's directory first on ``sys.path`` (our ``python3``
kernel spec: ``import_path``'s runner, IPython's ``ignore_cwd``): a module planted in a
directory others can write never runs as the owner; in one only the owner can write it is
on the path (at the end), as before.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

import dask.config
import psutil

from ..errors import say
from ..guard import import_path, private
from ..guard.connection import SchedulerInfo
from ..planning.plan import Plan
from .children import die_with_parent

HOST = "127.0.0.1"  # also in the link and the tunnel: `localhost` may be ::1, anyone's port
DEFAULT_PORT = 8888
PORT_TRIES = 50  # ports looked at for a free one
TRIES = 3  # JupyterLabs started before giving up (another user took each port first)


def free_port(host: str, first: int, tries: int = PORT_TRIES) -> int | None:
    """The first port from ``first`` on that nobody listens on at ``host`` (None: none)."""
    for port in range(first, first + tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError as error:
                if error.errno in (errno.EADDRINUSE, errno.EACCES):
                    continue
                raise
            return port
    return None


def _log_tail(path: os.PathLike[str], lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def jupyter_argv(port: int) -> list[str]:
    """The JupyterLab command line (no secrets on it)."""
    jupyter = import_path.program("jupyter") or "jupyter"  # checked by the plan already
    as_root = ["--allow-root"] if os.geteuid() == 0 else []  # containers, test machines
    return [
        jupyter,
        "lab",
        "--no-browser",
        f"--ServerApp.ip={HOST}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.allow_remote_access=False",
        *as_root,
    ]


def kernel_spec(directory: Path) -> Path:
    """Our ``python3`` kernel spec under ``directory`` (put first on JUPYTER_PATH): this
    Python, through ``import_path``, with IPython's ``ignore_cwd``."""
    spec = directory / "kernels" / "python3"
    spec.mkdir(parents=True, mode=0o700, exist_ok=True)  # in the cluster's private directory
    argv = [
        *import_path.python_argv("dask_hpc.guard.import_path"),
        "ipykernel_launcher",
        "--IPKernelApp.ignore_cwd=True",
        "-f",
        "{connection_file}",
    ]
    body = {"argv": argv, "display_name": "Python 3 (ipykernel)", "language": "python"}
    private.write_file(spec / "kernel.json", json.dumps(body, indent=1).encode())
    return directory


def _listens(pid: int, port: int) -> bool:
    """Does process ``pid`` itself hold a listening socket on HOST:``port``?"""
    try:
        proc = psutil.Process(pid)
        connections = getattr(proc, "net_connections", proc.connections)("tcp4")
    except psutil.Error:
        return False
    return any(
        c.status == psutil.CONN_LISTEN and tuple(c.laddr) == (HOST, port) for c in connections
    )


def _served_port(proc: subprocess.Popen[bytes], runtime: Path, deadline: float) -> int | None:
    """The port ``proc`` says it serves on (its server file), once it listens there; None
    when it ends or the deadline passes first."""
    info = runtime / f"jpserver-{proc.pid}.json"
    delay = 0.05
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            port = int(json.loads(info.read_text())["port"])
        except (OSError, ValueError, KeyError, TypeError):
            port = None
        if port is not None and _listens(proc.pid, port):
            return port
        time.sleep(delay)  # polling a condition with a deadline, not a fixed wait
        delay = min(delay * 1.5, 0.5)
    return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def start_jupyter(
    plan: Plan, info: SchedulerInfo
) -> tuple[subprocess.Popen[bytes], str, int] | None:
    """Start JupyterLab and wait until it serves; (process, URL with token, port), or None
    after one line saying why it did not start."""
    first = int(dask.config.get("hpc.jupyter-port", DEFAULT_PORT))
    token = secrets.token_hex(24)
    log = plan.cluster_dir / "jupyterlab.log"
    runtime = plan.cluster_dir / "jupyter-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)  # in the cluster's private directory
    data = kernel_spec(plan.cluster_dir / "jupyter")
    env = dict(os.environ)
    env.update(info.client_env())
    env.update(JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(runtime))
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(data), env.get("JUPYTER_PATH")) if p)
    parent = os.getpid()
    deadline = time.monotonic() + plan.timeout
    why = "no answer"
    port = free_port(HOST, first) or 0  # none free near it: the kernel picks one
    for _ in range(TRIES):
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                jupyter_argv(port),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                preexec_fn=lambda: die_with_parent(15, parent),  # SIGTERM: it stops its kernels
            )
        served = _served_port(proc, runtime, deadline)
        if served is not None:
            return proc, f"http://{HOST}:{served}/lab?token={token}", served
        timed_out = proc.poll() is None
        _stop(proc)
        why = f"{'no answer in time' if timed_out else f'status {proc.returncode}'}: "
        why += _log_tail(log, 2)
        if timed_out:
            break
        port = 0  # then a port the kernel picks, on no command line before it is bound
    say(f"JupyterLab did not start on {HOST} ({why}); the cluster runs on without it: see {log}")
    return None
