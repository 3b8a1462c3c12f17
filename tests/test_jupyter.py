"""--jupyter: JupyterLab on the scheduler's node on a Unix socket only the owner can open, token
required, linked at the user's end of the printed ssh tunnel, and a kernel started through
Jupyter's REST API connects to the cluster with a bare ``Client()``. What another user of the
node can do about it: tests/neighbour/test_jupyter_private.py."""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.waiting import free_ports
from jobs.background import Background, routable
from jupyter_support import (
    KERNEL_CODE,
    announced,
    execute,
    jupyter_processes,
    lab_request,
    start_kernel,
    tcp_listeners,
)
from support import assert_tokens_left_out, cluster_links, printed_scheduler_file, start_cluster

from dask_hpc.running.banner import ssh_tunnel
from dask_hpc.running.jupyter import lab_argv
from dask_hpc.running.jupyter_lab import found_extensions, with_others_disabled


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def test_jupyterlab_on_its_socket_with_a_token_and_a_kernel_reaches_the_cluster(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    port = free_ports(1)[0]  # the user's end of the tunnel: nothing of ours listens there
    env = {**cluster_env, "DASK_HPC__JUPYTER_PORT": str(port), "SSH_CONNECTION": "10 1 10 22"}
    argv = [*start_cluster(), "cpu", "1", "--jupyter", "--interface", routable()[0]]
    run = Background(
        [*argv, "--dashboard-address", "127.0.0.1:0", "--timeout", "60"], env, tmp_path
    )
    run.wait_text("Dask cluster ready", 60)
    links = cluster_links(printed_scheduler_file(run.stderr), env)
    assert_tokens_left_out(run.stderr, links)  # not a terminal: `hpc-cluster links` has them
    lab = announced(links["jupyterlab"], run.stderr)
    assert lab.port == port, links
    tunnel = next(line for line in run.stderr.splitlines() if "ssh -t" in line)
    assert f"-L 127.0.0.1:{port}:{lab.socket} " in tunnel, tunnel  # the node's hop: the socket
    mode = os.stat(lab.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(lab.socket.parent).st_mode) == 0o700
    assert tcp_listeners(jupyter_processes(run.proc.pid)) == {}  # no TCP at all
    assert run.listening_on(port) == set()

    assert lab_request(lab, "/lab", token=lab.token)[0] == 200
    assert lab_request(lab, "/lab")[0] in (302, 403)  # to the login page
    assert lab_request(lab, "/api/status")[0] == 403
    assert lab_request(lab, "/api/kernels", "POST")[0] == 403
    status, body = lab_request(lab, "/api/contents", token=lab.token)  # the files root
    assert status == 200 and '"path": ""' in body, body

    kernel = start_kernel(lab)
    output = asyncio.run(execute(lab, kernel, KERNEL_CODE))
    assert re.search(r"KERNEL 42 tls://", output), output
    run.signal(signal.SIGTERM)
    assert run.wait(40) == 128 + signal.SIGTERM, run.output()
    assert not lab.socket.parent.exists(), "JupyterLab's runtime directory was left behind"


def test_the_tunnel_forwards_to_the_socket_from_the_nodes_hop_only() -> None:
    """Through a login path, each hop before the node forwards to the next one's loopback; the
    node's hop to the socket. An address (the dashboard) is forwarded as before."""
    sock = "/tmp/dask-hpc-jupyter-x/jupyterlab.sock"
    words = ssh_tunnel(("bastion", "login"), "node", [(8888, sock), (8787, "10.0.0.5")])
    hops = words.split(" ssh ")
    assert len(hops) == 3 and hops[2].endswith(" node"), words
    for hop in hops[:2]:
        assert "-L 127.0.0.1:8888:127.0.0.1:8888 " in hop, hop
        assert "-L 127.0.0.1:8787:10.0.0.5:8787 " in hop, hop
    assert f"-L 127.0.0.1:8888:{sock} " in hops[2], hops[2]
    assert all("ExitOnForwardFailure=yes" in hop for hop in hops)
    alone = ssh_tunnel((), "localhost", [(8888, sock)])
    assert alone.endswith(f"-L 127.0.0.1:8888:{sock} {getpass.getuser()}@localhost")


def test_only_our_server_extensions_load(tmp_path: Path) -> None:
    """Every extension a config directory enables and we do not name is disabled on the
    command line; jupyter-lsp only with language servers on."""
    argv = lab_argv(tmp_path, tmp_path / "s.sock")
    ours = {a.split("=")[1] for a in argv if a.startswith("--ServerApp.jpserver_extensions=")}
    assert ours == {"jupyterlab", "jupyter_server_proxy"}, argv
    assert "--ServerApp.jpserver_extensions=jupyter_lsp=True" in lab_argv(
        tmp_path, tmp_path / "s.sock", language_servers=True
    )
    found = found_extensions()
    assert {"jupyter_lsp", "jupyter_server_terminals", "notebook_shim"} <= set(found), found
    full = with_others_disabled(argv, found)
    named = [a.split("=")[1:] for a in full if a.startswith("--ServerApp.jpserver_extensions=")]
    disabled = {name for name, enabled in named if enabled == "False"}
    assert disabled == set(found) - ours, full
    assert f"--ServerApp.root_dir={tmp_path}" in argv and "--KernelManager.transport=ipc" in argv
