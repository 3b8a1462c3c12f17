"""COMMAND: many connections that the cluster's listeners refuse, from this one peer.

    refused_connections.py N_SCHEDULER N_WORKER

Half of them plain TCP (an HTTP request where a TLS hello belongs), half TLS without a client
certificate; N_SCHEDULER to the scheduler, N_WORKER to a worker's listener. Each waits until
the listener has closed it (the refusal is then done), so the listeners have refused every one
before this job ends. Prints ``REFUSED {json}``: how many were sent where.
"""

import json
import os
import socket
import ssl
import sys

from distributed import Client


def refused(address: str, n: int) -> int:
    host, port = address.split("://", 1)[1].rsplit(":", 1)
    bare = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no certificate of ours, theirs unchecked
    bare.check_hostname = False
    bare.verify_mode = ssl.CERT_NONE
    for i in range(n):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            try:
                if i % 2:
                    sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    while sock.recv(4096):  # until the listener closes it
                        pass
                else:
                    with bare.wrap_socket(sock) as tls:
                        while tls.recv(4096):
                            pass
            except OSError:  # ssl.SSLError included: refused, the expected end
                pass
    return n


def main() -> None:
    from listed import workers  # here: tests import refused() as jobs.refused_connections

    at_scheduler, at_worker = int(sys.argv[1]), int(sys.argv[2])
    with Client(timeout=30) as client:
        worker = next(iter(workers(client)))
    sent = {
        "scheduler": refused(os.environ["DASK_SCHEDULER_ADDRESS"], at_scheduler),
        "worker": refused(worker, at_worker),
    }
    print("REFUSED " + json.dumps(sent), flush=True)


if __name__ == "__main__":
    main()
