"""An elastic cluster's scheduler: in the user's process, or alone in a batch job
(``python -P -m dask_hpc.elastic.scheduler``, for login nodes that kill long processes).

Either way it speaks TLS only, with the cluster's own certificates (``security.create``: a
fresh CA whose key is never written), its dashboard asks for a token (``dashboard.protect``),
and it publishes itself in the cluster's scheduler file, which the jobs' workers ``--join``.
It also answers ``dask_hpc_targets``: how many workers each pool wants (``targets.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

from distributed import Scheduler
from distributed.utils import get_ip

from ..at_scale import event_loop, heartbeats
from ..at_scale.lighter_tls import Security
from ..errors import UsageError, say
from ..guard import dashboard
from ..guard.connection import SchedulerInfo, write_scheduler_file
from ..guard.import_path import settle
from ..guard.security import TlsFiles
from ..planning.network import interface_address, parse_dashboard
from . import targets

SCHEDULER_FILE = "scheduler.json"


def security_for(files: TlsFiles) -> Security:
    """Dask's Security for every role of the cluster: its one certificate, TLS 1.3 only."""
    cert, key = str(files.cert), str(files.key)
    return Security(
        tls_ca_file=str(files.ca),
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_min_version=ssl.TLSVersion.TLSv1_3,
        require_encryption=True,
    )


def listen_host(interface: str | None) -> str:
    """The address workers reach the scheduler on: the interface's, else the routed one."""
    return interface_address(interface) if interface else get_ip()


async def start(
    directory: Path,
    cluster_id: str,
    files: TlsFiles,
    host: str,
    dashboard_address: str,
) -> tuple[Scheduler, SchedulerInfo]:
    """Start the scheduler in this event loop and publish its scheduler file."""
    scheduler, token = dashboard.gated_scheduler(
        host=host,
        port=0,
        protocol="tls",
        dashboard_address=dashboard_address,
        security=security_for(files),
    )
    targets.install(scheduler)
    heartbeats.serve(scheduler)
    await scheduler
    dash = scheduler.services.get("dashboard")
    info = SchedulerInfo(
        address=scheduler.address,
        dashboard_port=dash.port if dash else None,
        dashboard_host=parse_dashboard(dashboard_address)[0],
        host=socket.gethostname(),
        launch_id=cluster_id,
        tls=files,
        dashboard_token=token,
    )
    write_scheduler_file(directory / SCHEDULER_FILE, info)
    return scheduler, info


def main(argv: list[str] | None = None) -> int:
    """The scheduler's batch job: run until the cluster closes it, or the job is cancelled."""
    for line in settle():  # the submit directory on sys.path only if it is safe
        say(line)
    parser = argparse.ArgumentParser(prog="python -m dask_hpc.elastic.scheduler")
    parser.add_argument("--directory", required=True, help="the cluster's directory")
    parser.add_argument("--cluster-id", required=True)
    parser.add_argument("--interface", help="network interface to listen on")
    args = parser.parse_args(argv)
    directory = Path(args.directory).absolute()
    files = TlsFiles.in_directory(directory)
    try:
        if not files.exist():
            raise UsageError(
                f"no TLS files in {directory}", "the cluster that submitted this job makes them"
            )
        os.chdir(directory)  # the cluster's own (0700): not the submit directory others write
        host = listen_host(args.interface)
    except UsageError as error:
        say(f"error: {error}")
        return error.exit_code

    async def serve() -> None:
        # The dashboard on the node's address (the owner's Jupyter proxies to it), token-gated.
        scheduler, info = await start(directory, args.cluster_id, files, host, f"{host}:0")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(
                sig, lambda: asyncio.ensure_future(scheduler.close(reason="job-cancelled"))
            )
        say(f"scheduler of cluster {args.cluster_id} at {info.address}")
        await scheduler.finished()

    event_loop.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
