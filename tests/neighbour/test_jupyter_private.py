"""JupyterLab as ``start-cluster --jupyter`` starts it is the owner's alone (issue 43).

Before, as the other user of the node (red team; JupyterLab 4.6.6, jupyter-server 2.21.1,
jupyter-lsp 2.3.1; the owner in a project directory of mode 0777):
- jupyter-lsp's language-server autodetection ran ``Rscript`` in JupyterLab's working
  directory, and R sourced the ``.Rprofile`` planted there; JupyterLab's import ran its bundled
  Yarn, which read the ``.yarnrc.yml`` planted in a directory above the environment (one under
  a sticky directory, as /tmp) and ran its ``yarnPath``: both as the owner, with no click;
- JupyterLab and its kernels listened on 127.0.0.1: the kernels' iopub (ZMQ PUB) took any
  subscriber, and every cell and output (the dashboard's token among them) was read.

Now JupyterLab works in the cluster's private directory, loads a fixed set of server
extensions, runs no Yarn or Node, serves on a Unix socket (0600) in a private runtime
directory, and its kernels talk ZMQ over IPC sockets there (``dask_hpc.running.jupyter``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jupyterlab
import psutil
import pytest
from harness.neighbour import Neighbour
from harness.venvs import venv_over_this_python
from jobs.background import Background
from jupyter_support import (
    KERNEL_CODE,
    Lab,
    announced,
    execute,
    jupyter_processes,
    lab_request,
    start_kernel,
    tcp_listeners,
)
from neighbour_support import QUIET
from support import cluster_links, printed_scheduler_file, start_cluster

pytestmark = pytest.mark.timeout(300)
AUDIT = Path("/work/shared/tools/audit-private")


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def plant(directory: str, marks: str, where: str) -> None:
    """As the other user: a ``.Rprofile`` (R sources it from its working directory) and a
    ``.yarnrc.yml`` whose ``yarnPath`` is their script (Yarn reads it in every directory above
    where it starts), each leaving a mark in ``marks`` when it runs."""
    Path(marks).mkdir(mode=0o777, exist_ok=True)
    place = Path(directory)
    (place / ".Rprofile").write_text(f'file.create("{marks}/rprofile-{where}")\n')
    script = place / "yarn-release.cjs"
    script.write_text(f"require('fs').writeFileSync('{marks}/yarn-{where}', 'ran')\n")
    (place / ".yarnrc.yml").write_text(f"yarnPath: {script}\n")


def environment_below(place: Path) -> Path:
    """The owner's Python environment below ``place`` (a venv over this Python with its own
    copy of jupyterlab, where Yarn starts, its own jupyter scripts, and this Python's
    JupyterLab assets and Jupyter config): its python."""
    env = place / "env"
    venv_over_this_python(env, pip=False)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    copy = env / "lib" / version / "site-packages" / "jupyterlab"
    shutil.copytree(Path(jupyterlab.__file__).parent, copy)
    for shared in ("share/jupyter", "etc/jupyter"):  # its assets, its extensions' config
        (env / shared).parent.mkdir(parents=True, exist_ok=True)
        (env / shared).symlink_to(Path(sys.prefix, shared))
    python = env / "bin" / "python"
    for name, module in (("jupyter", "jupyter_core.command"), ("jupyter-lab", "jupyterlab.labapp")):
        script = env / "bin" / name
        script.write_text(f"#!{python}\nimport sys\nfrom {module} import main\nsys.exit(main())\n")
        script.chmod(0o755)
    found = subprocess.run(
        [python, "-c", "import jupyterlab; print(jupyterlab.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert found.startswith(str(copy)), found  # the premise: JupyterLab is the one below place
    return python


def rscript_wrapper(directory: Path, log: Path) -> Path:
    """An ``Rscript`` for PATH that notes where it runs, then runs R's own (which sources
    ``./.Rprofile``); the test fails where R is not installed."""
    real = shutil.which("Rscript")
    if real is None:
        pytest.fail("no Rscript: install r-base-core (tests/setup/packages.sh)", pytrace=False)
    directory.mkdir(mode=0o700)
    wrapper = directory / "Rscript"
    wrapper.write_text(f'#!/bin/sh\necho "$PWD" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o700)
    return directory


def ran(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir())


def ready(argv: list[str], env: dict[str, str], cwd: Path, tmp_path: Path) -> Background:
    run = Background([*argv, "cpu", "1", "--jupyter", *QUIET], env, tmp_path, cwd=cwd)
    run.wait_text("Dask cluster ready", 150)
    return run


def end(run: Background) -> None:
    run.signal(signal.SIGTERM)
    assert run.wait(60) == 128 + signal.SIGTERM, run.output()


def the_lab(run: Background, env: dict[str, str]) -> Lab:
    links = cluster_links(printed_scheduler_file(run.stderr), env)
    return announced(links["jupyterlab"], run.stderr)


def test_what_others_planted_beside_and_above_never_runs(
    neighbour: Neighbour, owner_env: dict[str, str], project: Path, sticky: Path, tmp_path: Path
) -> None:
    """(a) A ``.Rprofile`` and a ``.yarnrc.yml`` in the project directory the owner starts in,
    and in the sticky directory above the owner's environment: none runs, at start nor when the
    browser loads JupyterLab and its extension manager. Language servers on (the user's
    choice): R's autodetection runs, in a directory only the owner writes."""
    python = environment_below(sticky)
    marks = project / "marks"
    neighbour.run(plant, str(project), str(marks), "project")
    neighbour.run(plant, str(sticky), str(marks), "above-environment")
    log = tmp_path / "rscript.log"
    path = f"{rscript_wrapper(tmp_path / 'bin', log)}:{owner_env['PATH']}"
    env = {**owner_env, "PATH": path, "DASK_HPC__JUPYTER_LANGUAGE_SERVERS": "True"}
    run = ready([str(python), "-P", "-m", "dask_hpc"], env, project, tmp_path)
    assert ran(marks) == [], run.output()
    lab = the_lab(run, env)
    status, page = lab_request(lab, "/lab", token=lab.token)
    assert status == 200, page
    config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S)[1])
    assert not config["buildCheck"] and not config["buildAvailable"], config
    for path in ("/lab/api/extensions?refresh=1", "/lab/api/build"):
        assert lab_request(lab, path, token=lab.token)[0] == 200, path
    assert ran(marks) == [], run.output()
    rscript_dirs = set(log.read_text().split()) if log.exists() else set()
    assert rscript_dirs, "R's language-server autodetection never ran: the control failed"
    for directory in rscript_dirs:
        st = os.stat(directory)
        assert st.st_uid == os.getuid() and not st.st_mode & 0o077, (directory, oct(st.st_mode))
    end(run)


def try_to_connect(path: str) -> str:
    """As the other user: connect to the Unix socket ``path``; what happened."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        return "connected"
    except OSError as error:
        return type(error).__name__
    finally:
        sock.close()


def try_to_list(path: str) -> str:
    """As the other user: list the directory ``path``; what happened."""
    try:
        return f"listed {os.listdir(path)}"
    except OSError as error:
        return type(error).__name__


def unix_listeners(proc: psutil.Process) -> list[str]:
    return [c.laddr for c in proc.net_connections(kind="unix") if c.laddr]


def audit(pid: int) -> list[dict]:
    """audit-private over the process tree of ``pid``: every finding, with its process."""
    assert AUDIT.exists(), f"{AUDIT} is missing: the shared tools are needed here"
    res = subprocess.run(
        [sys.executable, str(AUDIT), "--json", str(pid)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode in (0, 1), res.stderr
    report = json.loads(res.stdout)
    return [{**f, "cmd": p["cmd"]} for p in report["processes"] for f in p["findings"]]


def test_jupyterlab_and_its_kernels_listen_only_on_private_unix_sockets(
    neighbour: Neighbour, owner_env: dict[str, str], project: Path, sticky: Path, tmp_path: Path
) -> None:
    """(b) No TCP listener of JupyterLab or a kernel; the other user can neither connect to
    JupyterLab's socket or a kernel's nor list their directory. (c) A kernel started through
    JupyterLab's REST API reaches the cluster with a bare ``Client()``. (d) audit-private finds
    nothing of JupyterLab's or a kernel's but what the notebook's directory decides."""
    log = tmp_path / "rscript.log"
    env = {**owner_env, "PATH": f"{rscript_wrapper(tmp_path / 'bin', log)}:{owner_env['PATH']}"}
    run = ready(start_cluster(), env, project, tmp_path)
    procs = jupyter_processes(run.proc.pid)
    assert procs, run.output()
    assert tcp_listeners(procs) == {}, run.output()

    lab = the_lab(run, env)
    server = next(p for p in procs if str(lab.socket) in unix_listeners(p))
    runtime = lab.socket.parent
    st_dir, st_sock = os.stat(runtime), os.stat(lab.socket)
    assert st_dir.st_uid == os.getuid() and stat.S_IMODE(st_dir.st_mode) == 0o700, runtime
    assert stat.S_ISSOCK(st_sock.st_mode) and stat.S_IMODE(st_sock.st_mode) == 0o600
    assert lab_request(lab, "/api/status")[0] == 403  # the token is still needed
    assert lab_request(lab, "/api/status", token=lab.token)[0] == 200

    kernel = start_kernel(lab)  # (c)
    output = asyncio.run(execute(lab, kernel, KERNEL_CODE))
    assert re.search(r"KERNEL 42 tls://", output), output
    paths = asyncio.run(execute(lab, kernel, "import json, sys; print(json.dumps(sys.path))"))
    assert str(project) not in json.loads(paths) and "" not in json.loads(paths), paths
    kernels = jupyter_processes(server.pid)
    assert len(kernels) == 1, [p.cmdline() for p in server.children(recursive=True)]
    assert tcp_listeners([server, *kernels]) == {}  # (b), with a kernel running
    kernel_sockets = sorted(set(unix_listeners(kernels[0])))
    assert len(kernel_sockets) == 5, kernel_sockets  # shell, iopub, stdin, control, heartbeat
    for path in [str(lab.socket), *kernel_sockets]:
        assert Path(path).parent == runtime, path
        assert neighbour.run(try_to_connect, path) == "PermissionError", path
    assert neighbour.run(try_to_list, str(runtime)) == "PermissionError"
    assert not log.exists(), f"language servers were looked for: {log.read_text()}"

    # (d) What is left to the user's choices, out of JupyterLab's hands:
    accepted = [
        # jupyter-server starts a notebook's kernel in the notebook's directory: the user's
        # choice for their own code (our kernel spec keeps it off the front of sys.path:
        # tests/neighbour/test_endpoints.py).
        ("cwd", f"{project}: world-writable"),
        # The owner's own TMPDIR (this suite's sticky directory, as /tmp), inherited.
        ("env", f"TMPDIR entry {sticky}"),
    ]
    findings = audit(server.pid)
    left = [f for f in findings if not any(f["kind"] == k and t in f["what"] for k, t in accepted)]
    assert left == [], json.dumps(findings, indent=1)
    assert os.readlink(f"/proc/{kernels[0].pid}/cwd") == str(project)  # the notebook's
    assert any(f["kind"] == "cwd" and "jupyter_kernel" in f["cmd"] for f in findings), findings
    end(run)
