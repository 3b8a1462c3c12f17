"""TLS by default: only the owner's certificates get in; nothing else runs anything.

One real cluster (local mode, listening on this machine's routable address) is attacked by a
plain-TCP client, a TLS client without a certificate, and clients holding another cluster's
certificates. Each submits a function that would create a marker file; none may exist after.
"""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import probe, probe_result, start_cluster
from cryptography import x509
from distributed import Client
from distributed.security import Security
from harness.procs import run_cmd
from jobs.background import Background, routable

import dask_hpc
from dask_hpc import security


def _touch_function():  # a local function: pickled by value, workers need not import tests
    def touch(path: str) -> str:
        with open(path, "w") as f:
            f.write("ran")
        return path

    return touch


touch = _touch_function()


@pytest.fixture
def cluster(cluster_env: dict[str, str], tmp_path: Path) -> Iterator[dict]:
    """A running TLS cluster with default security settings: its scheduler file's contents."""
    interface, _ = routable()
    run = Background(
        [*start_cluster(), "cpu", "1", "--interface", interface, "--timeout", "30"],
        cluster_env,
        tmp_path,
    )
    run.wait_text("Dask cluster ready", 40)
    line = next(x for x in run.stderr.splitlines() if "scheduler file" in x)
    file = Path(line.split()[-1])
    info = json.loads(file.read_text())
    info["file"] = file
    yield info
    Background.kill_all()


def attempt(address: str, sec: Security | None, marker: Path) -> str:
    """Connect and submit ``touch(marker)``; what happened, in words."""
    try:
        client = Client(address, security=sec, timeout=3)
    except Exception as error:  # noqa: BLE001 - any refusal will do; we report which
        return f"refused: {type(error).__name__}"
    with client:  # it got in: show that it can run code (the test then fails)
        client.submit(touch, str(marker)).result(timeout=10)
    return "connected and ran"


def test_strangers_are_refused_and_run_nothing(cluster: dict, tmp_path: Path) -> None:
    address = cluster["address"]
    assert address.startswith("tls://")
    tls = cluster["dask_hpc"]["tls"]
    (tmp_path / "other-cluster").mkdir(mode=0o700)
    other = security.create(tmp_path / "other-cluster", "another-job")
    plain = "tcp://" + address.split("://", 1)[1]
    strangers = {
        "plain TCP": (plain, None),
        "TLS, no certificate": (address, Security(tls_ca_file=tls["ca"], require_encryption=True)),
        "another cluster's certificates": (
            address,
            Security(
                tls_ca_file=str(other.ca),
                tls_client_cert=str(other.cert),
                tls_client_key=str(other.key),
                require_encryption=True,
            ),
        ),
        "another cluster's certificate, this cluster's CA": (
            address,
            Security(
                tls_ca_file=tls["ca"],
                tls_client_cert=str(other.cert),
                tls_client_key=str(other.key),
                require_encryption=True,
            ),
        ),
    }
    markers = {}
    for name, (addr, sec) in strangers.items():
        markers[name] = tmp_path / f"marker-{len(markers)}"
        outcome = attempt(addr, sec, markers[name])
        assert outcome.startswith("refused"), f"{name}: {outcome}"
    # The owner gets in, the same function does run for it, and nobody else ever got in.
    owner_marker = tmp_path / "marker-owner"
    with dask_hpc.connect(cluster["file"]) as client:
        assert client.submit(touch, str(owner_marker)).result(timeout=30) == str(owner_marker)
        clients = client.run_on_scheduler(
            lambda dask_scheduler: [
                msg["client"]
                for _, msg in dask_scheduler.get_events("all")
                if isinstance(msg, dict) and msg.get("action") == "add-client"
            ]
        )
        assert clients == [client.id], clients
    assert owner_marker.read_text() == "ran"
    ran = [name for name, marker in markers.items() if marker.exists()]
    assert not ran, f"code of strangers ran: {ran}"


def test_files_are_private_and_the_ca_key_is_never_written(cluster: dict) -> None:
    directory = cluster["file"].parent
    tls = {k: Path(v) for k, v in cluster["dask_hpc"]["tls"].items()}
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(cluster["file"].stat().st_mode) == 0o600
    assert stat.S_IMODE(tls["key"].stat().st_mode) == 0o600
    assert {p.parent for p in tls.values()} == {directory}, "credentials not beside the file"
    holding_keys = [p.name for p in directory.iterdir() if b"PRIVATE KEY" in p.read_bytes()]
    assert holding_keys == [tls["key"].name], holding_keys
    ca = x509.load_pem_x509_certificate(tls["ca"].read_bytes())
    cert = x509.load_pem_x509_certificate(tls["cert"].read_bytes())
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_dashboard_listens_on_loopback_only_by_default(cluster: dict) -> None:
    _, ip = routable()
    port = cluster["services"]["dashboard"]
    assert ip in cluster["address"], "the scheduler should listen on the routable address"
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((ip, port), timeout=5).close()


def test_no_tls_opts_out_with_a_warning(cluster_env: dict[str, str]) -> None:
    argv = [*start_cluster(), "cpu", "1", "--no-tls", "--dashboard-address", "127.0.0.1:0"]
    res = run_cmd([*argv, "--", *probe()], timeout=60, env=cluster_env)
    assert res.returncode == 0, res
    assert "TLS is off: anyone who can reach the scheduler can run code as you" in res.stderr
    assert "TLS OFF" in res.stderr
    assert probe_result(res.stdout)["address"].startswith("tcp://")
