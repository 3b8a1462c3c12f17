"""JupyterLab on the scheduler's node, for the owner only: loopback, a token, the cluster's env.

JupyterLab listens on 127.0.0.1 (never on all interfaces): the owner reaches it through the
printed ssh tunnel, and the token (passed in the environment, not on the command line where
``ps`` would show it) keeps other users of the node out. Its kernels inherit the cluster's
``DASK_SCHEDULER_ADDRESS`` and TLS settings, so a bare ``Client()`` in a notebook connects.
It dies with the rank that started it (SIGTERM on the rank's death).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import socket
import subprocess
import time

import dask.config

from .children import die_with_parent
from .connection import SchedulerInfo
from .errors import StartupError
from .plan import Plan

HOST = "127.0.0.1"
DEFAULT_PORT = 8888
PORT_TRIES = 50


def free_port(host: str, first: int, tries: int = PORT_TRIES) -> int:
    """The first port from ``first`` on that nobody listens on at ``host``."""
    for port in range(first, first + tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError as error:
                if error.errno in (errno.EADDRINUSE, errno.EACCES):
                    continue
                raise
            return port
    raise StartupError(
        f"no free port for JupyterLab in {first}-{first + tries - 1} on {host}",
        "set DASK_HPC__JUPYTER_PORT to another first port",
    )


def _listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def _log_tail(path: os.PathLike[str], lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def jupyter_argv(port: int) -> list[str]:
    """The JupyterLab command line (no secrets on it)."""
    jupyter = shutil.which("jupyter") or "jupyter"
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


def start_jupyter(plan: Plan, info: SchedulerInfo) -> tuple[subprocess.Popen[bytes], str, int]:
    """Start JupyterLab, wait until it listens; return (process, URL with token, port)."""
    first = int(dask.config.get("hpc.jupyter-port", DEFAULT_PORT))
    port = free_port(HOST, first)
    token = secrets.token_hex(24)
    log = plan.cluster_dir / "jupyterlab.log"
    runtime = plan.cluster_dir / "jupyter-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ)
    env.update(info.client_env())
    env.update(JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(runtime))
    parent = os.getpid()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            jupyter_argv(port),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            preexec_fn=lambda: die_with_parent(15, parent),  # SIGTERM: it stops its kernels
        )
    deadline = time.monotonic() + plan.timeout
    delay = 0.05
    while not _listening(HOST, port):
        if proc.poll() is not None or time.monotonic() >= deadline:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise StartupError(
                f"JupyterLab did not start on {HOST}:{port} (status {proc.returncode}): "
                f"{_log_tail(log)}",
                f"see {log}",
            )
        time.sleep(delay)  # polling a condition with a deadline, not a fixed wait
        delay = min(delay * 1.5, 0.5)
    return proc, f"http://localhost:{port}/lab?token={token}", port
