"""HPCCluster in Jupyter: its widget and HTML repr from a real kernel, and behind JupyterHub
(``JUPYTERHUB_SERVICE_PREFIX``) a dashboard link that works through jupyter-server-proxy,
on a real Jupyter server; the repr's link carries no token."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

CELLS = [
    "from dask_hpc import HPCCluster\n"
    "cluster = HPCCluster('cpu', workers_per_node=1, walltime='00:10:00', quiet=True)\n"
    "cluster.scale(jobs=1)\n"
    "cluster.wait_for_workers(1, timeout=120)",
    "cluster",
    "cluster.close()",
]


def test_widget_and_repr_in_a_kernel(elastic_env, monkeypatch, tmp_path: Path) -> None:
    # Imported here: nbformat and jupyter_client take ~1 s of every pytest process's collection.
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    # The kernel is a process of its own: the test's settings go in its environment.
    monkeypatch.setenv("DASK_HPC__SCHEDULER_DIRECTORY", str(elastic_env))
    monkeypatch.setenv("DASK_HPC__CLUSTER__POLL_INTERVAL", "0.5")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    # The kernel on Unix sockets: TCP ports picked ahead of the kernel's own bind can be taken
    # meanwhile on a shared machine ("Address already in use", seen once).
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    try:
        NotebookClient(nb, km=km, timeout=240, resources={
            "metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if km.has_kernel:  # a kernel it was given, nbclient leaves running
            km.shutdown_kernel(now=True)
    data = nb.cells[1].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in data  # the live widget (ipywidgets)
    html = data["text/html"]
    assert "HPCCluster" in html and "Batch system: slurm" in html
    assert "<td style='text-align: left'>cpu</td>" in html  # the pools' table
    # the dashboard link, without its token: the saved notebook is a file others may read
    assert re.search(r"http://127\.0\.0\.1:\d+/status\b", html) and "token=" not in html
    assert "jobs=1" in data["text/plain"]


def browser(base: str, token: str) -> urllib.request.OpenerDirector:
    """A browser logged in to Jupyter (its session cookie, as a hub user has), keeping
    cookies and following redirects."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    with opener.open(f"{base}?token={token}", timeout=60) as response:
        assert response.status == 200
    return opener


def http_get(opener: urllib.request.OpenerDirector, url: str) -> tuple[int, str]:
    try:
        with opener.open(url, timeout=60) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_dashboard_link_through_jupyterhub_proxy(
    make_cluster, monkeypatch, tagged_env, tmp_path: Path, wait_for
) -> None:
    prefix = "/user/alice/"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", prefix)
    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:10:00")
    link = cluster.dashboard_login
    port = cluster.info.dashboard_port
    assert link.startswith(f"{prefix}proxy/127.0.0.1:{port}/status?token="), link
    assert cluster.dashboard_link == link.split("?")[0]  # the widget's: no token

    token = "jupyter-token-of-alice"
    log = tmp_path / "jupyter.log"
    with open(log, "w") as out:  # a port of its own choosing, read back from its log
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "server", "--no-browser", "--port=0",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.base_url={prefix}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
             "--allow-root"],
            env={**tagged_env, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        def serving() -> str | None:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text())
            if found:
                return found.group(1)
            return "exited" if server.poll() is not None else None

        jport = wait_for(serving, 60, what="jupyter server")
        assert server.poll() is None, log.read_text()
        hub = f"http://127.0.0.1:{jport}"
        status, body = http_get(browser(f"{hub}{prefix}", token), f"{hub}{link}")
        assert status == 200 and "Dask" in body, (status, body[:500])
        bare = link.split("?")[0]  # the proxy passes the owner through; the dashboard asks
        assert http_get(browser(f"{hub}{prefix}", token), f"{hub}{bare}")[0] == 403
    finally:
        server.terminate()
        server.wait(timeout=30)
