"""What TLS a cluster's connections negotiated, and who is refused; prints one JSON line.

    tls_settings.py SCHEDULER_FILE

``TLS {"client": [cipher, version, bits], "workers": {addr: [...]}, "scheduler": {addr: [...]},
"refused": {name: outcome}}``: the owner's client connection (``dask_hpc.connect``), each
worker's connection to the scheduler as the worker sees it and as the scheduler sees it, then
two clients that must be refused: one with this cluster's own certificate but TLS 1.2 at most,
and one with TLS 1.3 and no certificate.
"""

import json
import os
import ssl
import sys
from pathlib import Path

from distributed import Client
from distributed.security import Security

import dask_hpc


def worker_side(dask_worker) -> list:
    return list(dask_worker.batched_stream.comm.extra_info["cipher"])


def scheduler_side(dask_scheduler) -> dict:
    return {a: list(s.comm.extra_info["cipher"]) for a, s in dask_scheduler.stream_comms.items()}


def attempt(address: str, sec: Security) -> str:
    try:
        client = Client(address, security=sec, timeout=3)
    except Exception as error:  # noqa: BLE001 - any refusal will do; we report which
        return f"refused: {type(error).__name__}"
    client.close()
    return "connected"


def main() -> None:
    file = sys.argv[1]
    info = json.loads(Path(file).read_text())
    address, tls = info["address"], info["dask_hpc"]["tls"]
    seen: dict = {}
    with dask_hpc.connect(file) as client:
        seen["client"] = list(client.scheduler_comm.comm.extra_info["cipher"])
        seen["workers"] = client.run(worker_side)
        seen["scheduler"] = client.run_on_scheduler(scheduler_side)
    own = {
        "tls_ca_file": tls["ca"],
        "tls_client_cert": tls["cert"],
        "tls_client_key": tls["key"],
        "require_encryption": True,
    }
    seen["refused"] = {
        "own certificate, TLS 1.2": attempt(
            address, Security(**own, tls_max_version=ssl.TLSVersion.TLSv1_2)
        ),
        "TLS 1.3, no certificate": attempt(
            address, Security(tls_ca_file=tls["ca"], require_encryption=True)
        ),
    }
    print("TLS " + json.dumps(seen), flush=True)
    # Clients whose constructor failed can block in their finalizers at interpreter exit.
    os._exit(0)


if __name__ == "__main__":
    main()
