"""start-cluster's listeners hand out no TLS session tickets (lighter_tls), and still refuse
whoever has no certificate of the cluster."""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
from pathlib import Path

import pytest
from distributed import Scheduler

from dask_hpc.at_scale import lighter_tls
from dask_hpc.guard import security

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "handshakes.py"


@pytest.fixture
def files(tmp_path: Path) -> security.TlsFiles:
    os.chmod(tmp_path, 0o700)
    return security.create(tmp_path, "test")


def tls(files: security.TlsFiles, cls: type) -> lighter_tls.Security:
    return cls(tls_ca_file=str(files.ca), tls_scheduler_cert=str(files.cert),
               tls_scheduler_key=str(files.key), tls_worker_cert=str(files.cert),
               tls_worker_key=str(files.key), require_encryption=True)  # fmt: skip


def session_after_connecting(address: str, context: ssl.SSLContext) -> ssl.SSLSession:
    host, port = address.removeprefix("tls://").rsplit(":", 1)

    async def connect() -> ssl.SSLSession:
        reader, writer = await asyncio.open_connection(host, int(port), ssl=context,
                                                       server_hostname=None)  # fmt: skip
        try:  # the tickets come after the handshake: read until they are in, or none came
            await asyncio.wait_for(reader.read(1), 0.5)
        except (asyncio.TimeoutError, TimeoutError):
            pass
        session = writer.get_extra_info("ssl_object").session
        writer.close()
        return session

    return asyncio.run(connect())


@pytest.mark.parametrize("cls, tickets", [(lighter_tls.Security, False),
                                          (lighter_tls.security.Security, True)])  # fmt: skip
def test_a_scheduler_with_lighter_tls_issues_no_session_tickets(files, cls, tickets) -> None:
    async def serve(got: list) -> None:
        sec = tls(files, cls)
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0", protocol="tls",
                             security=sec) as scheduler:  # fmt: skip
            client = sec.get_connection_args("worker")["ssl_context"]
            got.append(await asyncio.to_thread(session_after_connecting, scheduler.address,
                                               client))  # fmt: skip

    got: list[ssl.SSLSession] = []
    asyncio.run(asyncio.wait_for(serve(got), 60))
    assert got[0].has_ticket is tickets  # Dask's own context hands out tickets (the contrast)


def test_the_handshake_benchmark_prints_its_table(run_cmd) -> None:
    result = run_cmd([sys.executable, str(BENCH), "--repeat", "5"], timeout=120)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 5 and rows[1].startswith("| Dask's context (2 session tickets) | ")
