"""JupyterLab on the scheduler's node, private by construction: a Unix socket only the owner
can open, a token, the cluster's env, nothing run from a directory others can write.

Where things are (``start_jupyter``):

- JupyterLab and what it starts itself work in the cluster's private directory
  (``<cluster_dir>/jupyter``, 0700, which also holds our ``python3`` kernel spec): programs
  that read startup files from their working directory (R's ``.Rprofile``, Yarn's and npm's
  rc files, ``jupyter_*_config.py``) find only ours. Its files root stays the user's directory
  (``ServerApp.root_dir``: ``plan.user_directory``), so notebooks open where the user is.
- It serves on a Unix socket (``jupyterlab.sock``, 0600) in a new private runtime directory
  (``mkdtemp``, 0700, node-local: ``$TMPDIR``, or /tmp where a socket path would not fit),
  never on TCP. Its kernels talk ZMQ over IPC sockets beside their connection files there
  (``KernelManager.transport=ipc``), so no other user of the node can subscribe to a kernel's
  iopub or reach its shell. The directory goes when JupyterLab does (``JupyterLab.stop``).
- The token stays (passed in the environment, not on the command line where ``ps`` shows it):
  the user's browser reaches the socket through an ssh tunnel whose intermediate hops listen
  on 127.0.0.1 of shared login nodes.

The link is ``http://127.0.0.1:PORT/lab?token=...`` for the user's end of the tunnel
(``hpc.jupyter-port``, 8888); nothing listens on that port on the node: the tunnel's last hop
forwards it to the socket (``ssh -L 127.0.0.1:PORT:/path/jupyterlab.sock node``, ``banner``).
In local mode without an ssh session (the user at their own machine) the ready block gives
the same forward through ``ssh localhost``: a browser cannot open a Unix socket itself, and an
ssh forward is the one way that needs nothing installed but ssh and opens no listener of ours.

What runs (``lab_argv``, ``jupyter_lab``): a fixed set of server extensions, jupyterlab and,
where installed, jupyter_server_proxy (the dashboard through JupyterLab); every other one a
config directory enables is disabled, terminals too. jupyter-lsp's language-server
autodetection (it runs ``Rscript``, ``julia``, ``npm`` at start) is off unless the user sets
``hpc.jupyter-language-servers: true``; then it runs in the private directory above. No build,
no Yarn, no Node: the build check is off, the extension manager read-only, and the Yarn that
JupyterLab's import runs is answered without running it (``jupyter_lab``).

Our ``python3`` kernel spec runs ipykernel as ``jupyter_kernel`` does: without the two
listeners ipykernel opens on 127.0.0.1 whatever the transport (the IOPub pipe of forked
children, the debugger's debugpy). Its kernels run in the notebook's directory (jupyter-server
starts them there): the user's choice for their own code, left as it is; the spec keeps that
directory off the front of ``sys.path`` (``import_path``'s runner, IPython's ``ignore_cwd``):
a module planted in a directory others can write never runs as the owner. Kernels inherit
the cluster's ``DASK_SCHEDULER_ADDRESS`` and TLS settings, so a bare ``Client()`` connects.
JupyterLab dies with the rank that started it (SIGTERM on the rank's death).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import dask.config

from ..errors import say
from ..guard import import_path, private, private_files
from ..guard.connection import LOOPBACK, SchedulerInfo
from ..planning.plan import Plan
from .children import die_with_parent

DEFAULT_PORT = 8888  # hpc.jupyter-port: the user's end of the tunnel
LANGUAGE_SERVERS = "hpc.jupyter-language-servers"
SOCKET = "jupyterlab.sock"
KERNEL_SOCKET_NAME = len("kernel-") + 36 + len("-ipc-") + 2  # kernel-<uuid>-ipc-<n>
PLAIN_PATH = re.compile(r"[\w./-]+")  # fits an ssh -L forward as it is (no ':', no spaces)


@dataclass
class JupyterLab:
    """A JupyterLab that serves: its process, the link (with its token), the port of the
    link (the user's end of the tunnel), its socket, and its private runtime directory."""

    proc: subprocess.Popen[bytes]
    url: str
    port: int
    socket: Path
    runtime: Path

    def stop(self) -> None:
        """SIGTERM (it shuts its kernels down), SIGKILL after 10 s; then its directory goes."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.runtime, ignore_errors=True)


def runtime_directory() -> Path:
    """A new private directory (0700) for JupyterLab's socket, server file and kernels'
    connection files and IPC sockets, whose socket paths fit (``private.socket_directory``)
    and which an ssh forward can name as it is."""
    path = private.socket_directory("dask-hpc-jupyter-", KERNEL_SOCKET_NAME)
    if not PLAIN_PATH.fullmatch(str(path)):
        path.rmdir()
        path = Path(tempfile.mkdtemp(prefix="dask-hpc-jupyter-", dir="/tmp"))
    return path


def server_extensions(language_servers: bool) -> list[str]:
    """The server extensions we load: jupyterlab, jupyter_server_proxy where installed,
    jupyter_lsp only when the user asks for language servers."""
    wanted = ["jupyterlab", "jupyter_server_proxy"] + (["jupyter_lsp"] if language_servers else [])
    return [name for name in wanted if importlib.util.find_spec(name) is not None]


def lab_argv(root: Path, sock: Path, language_servers: bool = False) -> list[str]:
    """The JupyterLab command line (no secrets on it): ``jupyter_lab``'s runner in this Python."""
    as_root = ["--allow-root"] if os.geteuid() == 0 else []  # containers, test machines
    extensions = [
        f"--ServerApp.jpserver_extensions={name}=True"
        for name in server_extensions(language_servers)
    ]
    return [
        *import_path.python_argv("dask_hpc.running.jupyter_lab"),
        "--no-browser",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.sock={sock}",
        "--ServerApp.sock_mode=0600",
        "--ServerApp.terminals_enabled=False",
        "--KernelManager.transport=ipc",
        "--LabApp.extension_manager=readonly",
        # the browser neither checks nor offers a build (each would run Node)
        "--ServerApp.tornado_settings="
        "{'page_config_data': {'buildCheck': False, 'buildAvailable': False}}",
        *extensions,
        *as_root,
    ]


def kernel_spec(directory: Path) -> Path:
    """Our ``python3`` kernel spec under ``directory`` (put first on JUPYTER_PATH): this
    Python, through ``import_path``, with IPython's ``ignore_cwd``: ipykernel as
    ``jupyter_kernel`` runs it, without the debugger and IOPub pipe it would open on TCP."""
    spec = directory / "kernels" / "python3"
    spec.mkdir(parents=True, mode=0o700, exist_ok=True)  # in the cluster's private directory
    argv = [
        *import_path.python_argv("dask_hpc.guard.import_path"),
        "dask_hpc.running.jupyter_kernel",  # ipykernel without its loopback listeners
        "--IPKernelApp.ignore_cwd=True",
        "-f",
        "{connection_file}",
    ]
    body = {"argv": argv, "display_name": "Python 3 (ipykernel)", "language": "python"}
    private_files.write_file(spec / "kernel.json", json.dumps(body, indent=1).encode())
    return directory


def _answers(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


def _serving(proc: subprocess.Popen[bytes], runtime: Path, sock: Path, deadline: float) -> bool:
    """Does ``proc`` serve on ``sock`` (its server file says so, and the socket answers)?
    False when it ends or the deadline passes first. Only we can make files in ``runtime``."""
    info = runtime / f"jpserver-{proc.pid}.json"
    delay = 0.05
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            served = json.loads(info.read_text()).get("sock")
        except (OSError, ValueError, AttributeError):
            served = None
        if served == str(sock) and _answers(sock):
            return True
        time.sleep(delay)  # polling a condition with a deadline, not a fixed wait
        delay = min(delay * 1.5, 0.5)
    return False


def _log_tail(path: os.PathLike[str], lines: int = 2) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def tunnel_port() -> int | None:
    """``hpc.jupyter-port`` (None after one line saying it is not a port number)."""
    value = dask.config.get("hpc.jupyter-port", DEFAULT_PORT)
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        say(f"hpc.jupyter-port {value!r} is not a port number: set 1-65535 (default 8888)")
        return None
    return port


def start_jupyter(plan: Plan, info: SchedulerInfo) -> JupyterLab | None:
    """Start JupyterLab and wait until it serves on its socket; None after one line saying
    why it did not start (the cluster runs on without it, nothing is linked)."""
    port = tunnel_port()
    if importlib.util.find_spec("jupyterlab") is None:
        say(f"JupyterLab is not installed for {sys.executable}: pip install '.[jupyter]'")
        port = None
    if port is None:
        say("the cluster runs on without JupyterLab")
        return None
    token = secrets.token_hex(24)
    log = plan.cluster_dir / "jupyterlab.log"
    work = plan.cluster_dir / "jupyter"
    work.mkdir(mode=0o700, exist_ok=True)  # in the cluster's private directory
    kernel_spec(work)
    runtime = runtime_directory()
    sock = runtime / SOCKET
    env = dict(os.environ)
    env.update(info.client_env())
    env.update(JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(runtime))
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(work), env.get("JUPYTER_PATH")) if p)
    language_servers = bool(dask.config.get(LANGUAGE_SERVERS, False))
    parent = os.getpid()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            lab_argv(plan.user_directory, sock, language_servers),
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            preexec_fn=lambda: die_with_parent(15, parent),  # SIGTERM: it stops its kernels
        )
    lab = JupyterLab(proc, f"http://{LOOPBACK}:{port}/lab?token={token}", port, sock, runtime)
    if _serving(proc, runtime, sock, time.monotonic() + plan.timeout):
        return lab
    timed_out = proc.poll() is None
    lab.stop()
    why = "no answer in time" if timed_out else f"status {proc.returncode}"
    say(
        f"JupyterLab did not start ({why}: {_log_tail(log)}); the cluster runs on without it: "
        f"see {log}"
    )
    return None
