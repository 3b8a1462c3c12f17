"""What one TLS handshake costs a Dask listener (the scheduler's, per joining worker).

A cluster's certificates as start-cluster makes them (``security.create``: P-256, one CA),
Dask's TLS contexts for the scheduler and a worker (mutual TLS 1.3), the handshake run in
memory (``ssl.MemoryBIO``, no sockets) so only the listener's own CPU is timed, per variant:
Dask's context as it is; without session tickets (``lighter_tls``, what start-cluster's
listeners use); a resumed session (what tickets would buy, if tornado resumed sessions: it
does not); no client certificate check (not an option: the cluster's only access control).

    PYTHONPATH=src python benchmarks/handshakes.py [--repeat 300]
"""

from __future__ import annotations

import argparse
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, session: ssl.SSLSession | None
              ) -> tuple[float, ssl.SSLObject]:  # fmt: skip
    """The server's CPU seconds for one handshake, and the client's end (with its session)."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_side=False, session=session)
    cpu, done = 0.0, [False, False]
    for _ in range(10):
        for i, (end, outbox, other) in enumerate(((c, c_out, s_in), (s, s_out, c_in))):
            if not done[i]:
                start = time.thread_time()
                try:
                    end.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
                if end is s:
                    cpu += time.thread_time() - start
            other.write(outbox.read())
        if all(done):
            break
    try:
        c.read(1)  # takes in the session tickets the server sent, if any
    except ssl.SSLWantReadError:
        pass
    return cpu, c


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300)
    repeat = parser.parse_args().repeat
    from distributed.security import Security as DaskSecurity

    from dask_hpc.at_scale import lighter_tls
    from dask_hpc.guard import security

    directory = Path(tempfile.mkdtemp(prefix="dask-hpc-handshakes-"))
    os.chmod(directory, 0o700)
    files = security.create(directory, "handshakes")
    paths = {"tls_ca_file": str(files.ca), "require_encryption": True,
             **{f"tls_{role}_{kind}": str(getattr(files, kind)) for role in ("scheduler", "worker")
                for kind in ("cert", "key")}}  # fmt: skip

    def contexts(cls: type) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        sec = cls(**paths)
        return sec.get_listen_args("scheduler")["ssl_context"], sec.get_connection_args(
            "worker")["ssl_context"]  # fmt: skip

    def no_client_check() -> tuple[ssl.SSLContext, ssl.SSLContext]:
        server, client = contexts(lighter_tls.Security)
        server.verify_mode = ssl.CERT_NONE
        return server, client

    variants: list[tuple[str, Callable[[], tuple], bool]] = [
        ("Dask's context (2 session tickets)", lambda: contexts(DaskSecurity), False),
        ("no session tickets (start-cluster's listeners)",
         lambda: contexts(lighter_tls.Security), False),
        ("a resumed session (tornado never resumes one)", lambda: contexts(DaskSecurity), True),
        ("no client certificate check (not an option)", no_client_check, False),
    ]  # fmt: skip
    print(f"\nOne TLS handshake, the listener's CPU (median of {repeat}; load "
          f"{os.getloadavg()[0]:.1f})\n| variant | ms |\n|---|---|")  # fmt: skip
    for name, make, resume in variants:
        server, client = make()
        times, session = [], None
        for _ in range(repeat):
            cpu, end = handshake(server, client, session if resume else None)
            times.append(cpu)
            session = session or end.session
        print(f"| {name} | {1000 * statistics.median(times):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
