"""--jupyter: JupyterLab on the scheduler's node, loopback only, token required, and a kernel
started through Jupyter's REST API connects to the cluster with a bare ``Client()``."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.waiting import free_ports
from jobs.background import Background, routable
from jupyter_support import execute, http
from support import assert_tokens_left_out, cluster_links, printed_scheduler_file, start_cluster

KERNEL_CODE = """
from distributed import Client
client = Client(timeout=30)
print("KERNEL", client.submit(lambda x: x + 1, 41).result(), client.scheduler.address)
client.close()
"""


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def test_jupyterlab_token_loopback_and_a_kernel_reaches_the_cluster(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    busy = socket.socket()  # the first port is taken: JupyterLab must fall back to another
    busy.bind(("127.0.0.1", free_ports(1)[0]))
    busy.listen()
    first = busy.getsockname()[1]
    env = {**cluster_env, "DASK_HPC__JUPYTER_PORT": str(first), "SSH_CONNECTION": "10 1 10 22"}
    argv = [*start_cluster(), "cpu", "1", "--jupyter", "--interface", routable()[0]]
    run = Background(
        [*argv, "--dashboard-address", "127.0.0.1:0", "--timeout", "60"], env, tmp_path
    )
    try:
        run.wait_text("Dask cluster ready", 60)
        links = cluster_links(printed_scheduler_file(run.stderr), env)
        assert_tokens_left_out(run.stderr, links)  # not a terminal: `hpc-cluster links` has them
        match = re.fullmatch(r"http://127.0.0.1:(\d+)/lab\?token=(\w+)", links["jupyterlab"])
        assert match, links
        port, token = int(match.group(1)), match.group(2)
        assert port != first, "JupyterLab did not fall back from a busy port"
        tunnel = next(line for line in run.stderr.splitlines() if "ssh -t" in line)
        assert f"-L 127.0.0.1:{port}:127.0.0.1:{port}" in tunnel

        base = f"http://127.0.0.1:{port}"
        assert http(f"{base}/lab?token={token}")[0] == 200
        assert http(f"{base}/lab")[0] in (302, 403)  # to the login page
        assert http(f"{base}/api/status")[0] == 403
        assert http(f"{base}/api/kernels", "POST")[0] == 403
        assert run.listening_on(port) == {"127.0.0.1"}  # loopback only, never all interfaces

        status, body = http(f"{base}/api/kernels", "POST", token)
        assert status == 201, body
        kernel = json.loads(body)["id"]
        output = asyncio.run(execute(port, kernel, token, KERNEL_CODE))
        assert re.search(r"KERNEL 42 tls://", output), output
    finally:
        busy.close()
    run.signal(signal.SIGTERM)
    assert run.wait(40) == 128 + signal.SIGTERM, run.output()
