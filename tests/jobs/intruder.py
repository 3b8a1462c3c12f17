"""Try to get into a cluster as strangers, then as its owner; print one JSON line each.

    intruder.py SCHEDULER_FILE OTHER_TLS_DIR MARKER_DIR

Strangers: plain TCP, TLS without a certificate, another cluster's certificates (with its own CA
and with this cluster's CA). Each that gets in submits ``touch(MARKER_DIR/<n>)``. Then the owner
connects with ``dask_hpc.connect`` and touches ``MARKER_DIR/owner``. Prints
``STRANGERS {name: outcome}`` and ``OWNER {"marker": ..., "clients": [...], "me": ...}``.
"""

import json
import os
import sys
from pathlib import Path

from distributed import Client
from distributed.security import Security

import dask_hpc


def touch(path: str) -> str:
    with open(path, "w") as f:
        f.write("ran")
    return path


def attempt(address: str, sec: Security | None, marker: str) -> str:
    try:
        client = Client(address, security=sec, timeout=3)
    except Exception as error:  # noqa: BLE001 - any refusal will do; we report which
        return f"refused: {type(error).__name__}"
    with client:  # it got in: show that it can run code (the test then fails)
        client.submit(touch, marker).result(timeout=10)
    return "connected and ran"


def added_clients(dask_scheduler) -> list:
    return [
        msg["client"]
        for _, msg in dask_scheduler.get_events("all")
        if isinstance(msg, dict) and msg.get("action") == "add-client"
    ]


def main() -> None:
    file, other, markers = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    info = json.loads(Path(file).read_text())
    address, tls = info["address"], info["dask_hpc"]["tls"]
    theirs = {
        "tls_client_cert": str(other / "cluster.pem"),
        "tls_client_key": str(other / "cluster.key"),
    }
    strangers = {
        "plain TCP": ("tcp://" + address.split("://", 1)[1], None),
        "TLS, no certificate": (address, Security(tls_ca_file=tls["ca"], require_encryption=True)),
        "another cluster's certificates": (
            address,
            Security(tls_ca_file=str(other / "ca.pem"), require_encryption=True, **theirs),
        ),
        "another cluster's certificate, this cluster's CA": (
            address,
            Security(tls_ca_file=tls["ca"], require_encryption=True, **theirs),
        ),
    }
    outcomes = {
        name: attempt(addr, sec, str(markers / f"stranger-{i}"))
        for i, (name, (addr, sec)) in enumerate(strangers.items())
    }
    print("STRANGERS " + json.dumps(outcomes), flush=True)
    with dask_hpc.connect(file) as client:
        marker = client.submit(touch, str(markers / "owner")).result(timeout=30)
        clients = client.run_on_scheduler(added_clients)
        print("OWNER " + json.dumps({"marker": marker, "clients": clients, "me": client.id}))
    sys.stdout.flush()
    # Clients whose constructor failed can block in their finalizers at interpreter exit.
    os._exit(0)


if __name__ == "__main__":
    main()
