"""Dask's ``Security``, with listeners that hand out no TLS session tickets.

After every TLS 1.3 handshake a server sends the client session tickets (two, by OpenSSL's
default) so that a later connection could resume the session. Dask never resumes one (tornado
opens every connection with a new session), so the tickets are work for nothing, and they are
a third of a listener's work per handshake: measured with the cluster's certificates (P-256,
mutual TLS 1.3, OpenSSL through Python's ``ssl``; ``benchmarks/handshakes.py``, medians of
300-1,000 handshakes, four runs on 2 shared cores) 1.1-1.6 ms of the listener's CPU per
handshake with tickets, 0.74-0.92 ms without. The scheduler does one handshake per joining
worker on its event loop: at 10,000 workers, 4-6 s of its start. The listeners of the
scheduler, the Nannies and the workers (data between workers) all use this; what a
connection can do, and who may make one, is unchanged.

Measured (benchmarks/handshakes.py): the listener's CPU per handshake 1.1-1.6 ms -> 0.74-0.92
ms. Checked against distributed 2026.7.1 (the range's low end, constraints.txt) and 2026.8.0
(the newest in range: tests/test_newest_dask.py runs its tests there).
"""

from __future__ import annotations

from typing import Any

from distributed import security


class Security(security.Security):
    """``distributed.security.Security`` whose listening contexts issue no session tickets."""

    def get_listen_args(self, role: str) -> dict[str, Any]:
        args = super().get_listen_args(role)
        context = args.get("ssl_context")
        if context is not None:
            context.num_tickets = 0  # TLS 1.3 only; a server-side context takes it
        return args
