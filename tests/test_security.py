"""TLS by default: only the owner's certificates get in; nothing else runs anything.

One real cluster (local mode, listening on this machine's routable address) is attacked by a
plain-TCP client, a TLS client without a certificate, and clients holding another cluster's
certificates. Each submits a function that would create a marker file; none may exist after.
"""

from __future__ import annotations

import json
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from harness.procs import run_cmd
from jobs.background import Background, routable
from support import probe, probe_result, start_cluster

from dask_hpc.guard import security

INTRUDER = Path(__file__).resolve().parent / "jobs" / "intruder.py"
TLS_SETTINGS = Path(__file__).resolve().parent / "jobs" / "tls_settings.py"


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
    info["run"] = run
    yield info
    Background.kill_all()


def lines(stdout: str, prefix: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith(prefix + " "):
            return json.loads(line[len(prefix) + 1 :])
    raise AssertionError(f"no {prefix} line in:\n{stdout}")


def test_strangers_are_refused_and_run_nothing(
    cluster: dict, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    assert cluster["address"].startswith("tls://")
    other = tmp_path / "other-cluster"
    other.mkdir(mode=0o700)
    security.create(other, "another-job")  # exactly what another cluster's rank 0 makes
    markers = tmp_path / "markers"
    markers.mkdir()
    argv = [sys.executable, str(INTRUDER), str(cluster["file"]), str(other), str(markers)]
    res = run_cmd(argv, timeout=90, env=cluster_env)
    assert res.returncode == 0, res
    strangers = lines(res.stdout, "STRANGERS")
    assert len(strangers) == 4
    for name, outcome in strangers.items():
        assert outcome.startswith("refused"), f"{name}: {outcome}"
    # The owner got in, the same function did run for it, and nobody else ever got in.
    owner = lines(res.stdout, "OWNER")
    assert Path(owner["marker"]).read_text() == "ran"
    assert owner["clients"] == [owner["me"]], owner
    ran = sorted(p.name for p in markers.iterdir() if p.name != "owner")
    assert not ran, f"code of strangers ran: {ran}"


def test_every_connection_is_tls_1_3_with_aes_gcm_and_mutual_auth_still_holds(
    cluster: dict, cluster_env: dict[str, str]
) -> None:
    """The settings benchmarks/transfer.py measured (docs/performance.md), on a real cluster."""
    res = run_cmd(
        [sys.executable, str(TLS_SETTINGS), str(cluster["file"])], timeout=90, env=cluster_env
    )
    assert res.returncode == 0, res
    seen = lines(res.stdout, "TLS")
    ciphers = [seen["client"], *seen["workers"].values(), *seen["scheduler"].values()]
    assert len(ciphers) == 3, seen  # the owner's client, the worker's stream from both ends
    for name, version, _bits in ciphers:
        assert version == "TLSv1.3", ciphers
        assert name.startswith("TLS_AES_") and "_GCM_" in name, ciphers
    assert set(seen["refused"]) == {"own certificate, TLS 1.2", "TLS 1.3, no certificate"}
    for name, outcome in seen["refused"].items():
        assert outcome.startswith("refused"), f"{name}: {outcome}"


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
    # Which addresses the cluster's own processes listen on at that port: a connection to the
    # routable address could reach another test's listener that drew the same port number.
    assert cluster["run"].listening_on(port) == {"127.0.0.1"}


def test_no_tls_opts_out_with_a_warning(cluster_env: dict[str, str]) -> None:
    argv = [*start_cluster(), "cpu", "1", "--no-tls", "--dashboard-address", "127.0.0.1:0"]
    res = run_cmd([*argv, "--", *probe()], timeout=60, env=cluster_env)
    assert res.returncode == 0, res
    assert "TLS is off: anyone who can reach the scheduler can run code as you" in res.stderr
    assert "TLS OFF" in res.stderr
    assert probe_result(res.stdout)["address"].startswith("tcp://")


def test_a_planted_symlink_for_the_key_directory_is_refused(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "job.dask-hpc").symlink_to(elsewhere)
    argv = [*start_cluster(), "cpu", "1", "--scheduler-file", str(shared / "job.json")]
    res = run_cmd([*argv, "--", "true"], timeout=60, env=cluster_env)
    assert res.returncode == 2, res
    assert "job.dask-hpc is a symbolic link" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not list(elsewhere.iterdir()), "keys were written through the symlink"
