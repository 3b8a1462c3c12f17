"""A roll call of the ranks: each worker rank keeps one TCP connection open to rank 0.

The kernel closes it when a rank's process ends, however it ends, so rank 0 knows which
ranks are alive without polling, and can wait until the others are gone before it exits (a
launcher that kills the remaining ranks when one exits then kills nobody). A worker rank
learns the same way, at once, that rank 0 is gone; rank 0 first writes ``ended`` to the
ranks it stops waiting for, so they can tell that from a crash. A connection must first present
the cluster's token (from the scheduler file, readable by the owner only), its rank and host.

Both ends turn on TCP keepalive: a node that dies without closing its connections (power lost,
kernel panic) is noticed within ``KEEPALIVE_IDLE + KEEPALIVE_COUNT * KEEPALIVE_INTERVAL`` s,
however busy the processes at either end are (the kernels answer the probes).
"""

from __future__ import annotations

import hmac
import secrets
import socket
from collections.abc import Callable

ENDED = b"ended\n"  # rank 0 to the ranks still connected when it gives up waiting for them
STOP = b"stop\n"  # rank 0 to every rank once the scheduler closed the workers it knows
BYE = b"bye\n"  # a rank to rank 0 as it ends on its own (its workers retired or stopped)
KEEPALIVE_IDLE = 10  # seconds of silence before the first probe
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3  # probes unanswered: the peer is gone (25 s in all)


def keepalive(conn: socket.socket) -> None:
    """Have the kernel probe a silent connection and close it when the peer's node is gone."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ):
        if hasattr(socket, option):  # Linux; elsewhere the system's defaults
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class Roster:
    """Rank 0's side: accept ranks, remember who is connected."""

    def __init__(
        self,
        host: str,
        watch: Callable[[int, Callable[[], None]], None],
        unwatch: Callable[[int], None],
    ) -> None:
        self.token = secrets.token_hex(16)
        self.listener = socket.create_server((host, 0), backlog=4096)
        self.listener.setblocking(False)
        self.alive: dict[int, socket.socket] = {}  # rank -> connection
        self.hosts: dict[int, str] = {}  # rank -> the host it said it runs on
        self._ranks: dict[int, tuple[int, socket.socket]] = {}  # fd -> its rank, connection
        self.left: list[int] = []  # ranks that connected, then went, in the order they went
        self.said_bye: set[int] = set()  # ranks that said they end (not lost)
        self._pending: dict[int, tuple[socket.socket, bytes]] = {}
        self._watch, self._unwatch = watch, unwatch
        watch(self.listener.fileno(), self._accept)

    @property
    def address(self) -> str:
        host, port = self.listener.getsockname()[:2]
        return f"{host}:{port}"

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        keepalive(conn)
        fd = conn.fileno()
        self._pending[fd] = (conn, b"")
        self._watch(fd, lambda: self._read(fd))

    def _read(self, fd: int) -> None:
        if fd in self._pending:
            conn, buffer = self._pending[fd]
            try:
                data = conn.recv(256)
            except BlockingIOError:
                return
            buffer += data
            if data and b"\n" not in buffer and len(buffer) < 200:
                self._pending[fd] = (conn, buffer)
                return
            del self._pending[fd]
            token, _, rest = buffer.decode(errors="replace").strip().partition(" ")
            rank, _, host = rest.partition(" ")
            if data and hmac.compare_digest(token, self.token) and rank.isdigit():
                self.alive[int(rank)] = conn
                self.hosts[int(rank)] = host or "?"
                self._ranks[fd] = (int(rank), conn)
                return
            self._drop(fd, conn)
            return
        if fd not in self._ranks:  # a lookup, not a scan: N ranks leave in O(N)
            return
        rank, conn = self._ranks[fd]
        try:
            data = conn.recv(256)
            if data:
                if BYE in data:
                    self.said_bye.add(rank)
                return
        except BlockingIOError:
            return
        except OSError:  # reset, or the keepalive probes went unanswered
            pass
        del self._ranks[fd]
        if self.alive.get(rank) is conn:
            del self.alive[rank]
            self.left.append(rank)
        self._drop(fd, conn)

    @property
    def lost(self) -> list[int]:
        """Ranks that went without saying so: killed, or their node died."""
        return [rank for rank in self.left if rank not in self.said_bye]

    def say_ended(self) -> None:
        """Tell the ranks still connected that rank 0 ends without them (best effort)."""
        self._say(ENDED)

    def say_stop(self) -> None:
        """Tell every rank that the cluster ends: stop what the scheduler could not close."""
        self._say(STOP)

    def _say(self, message: bytes) -> None:
        for conn in self.alive.values():
            try:
                conn.send(message)
            except OSError:
                pass

    def _drop(self, fd: int, conn: socket.socket) -> None:
        self._unwatch(fd)
        conn.close()

    def close(self) -> None:
        for fd, (conn, _) in list(self._pending.items()):
            self._drop(fd, conn)
        for fd, (_, conn) in list(self._ranks.items()):
            self._drop(fd, conn)
        self.alive.clear()
        self._ranks.clear()
        self._unwatch(self.listener.fileno())
        self.listener.close()


def join(
    address: str, token: str, rank: int, timeout: float, source: str | None = None
) -> socket.socket:
    """A worker rank's side: connect to rank 0's roster and say who and where we are
    (``source``: the address to connect from, else the one that routes there)."""
    host, _, port = address.rpartition(":")
    where = (source, 0) if source else None
    conn = socket.create_connection((host, int(port)), timeout=timeout, source_address=where)
    keepalive(conn)
    conn.sendall(f"{token} {rank} {socket.gethostname()}\n".encode())
    conn.setblocking(False)
    return conn


def where_lost(ranks: list[int], hosts: dict[int, str], shown: int = 4) -> str:
    """``rank 2 on node3``, or for many ranks lost at once one phrase, not a line per rank
    (at 1,000 workers, 100 ranks killed printed 100 lines): ``100 ranks (2-51, 60-109) on
    100 nodes (node3, node4, node5, node6, ...)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]} on {hosts.get(ranks[0], '?')}"
    nodes = list(dict.fromkeys(hosts.get(rank, "?") for rank in ranks))
    listed = ", ".join(nodes[:shown]) + (", ..." if len(nodes) > shown else "")
    return f"{len(ranks)} ranks ({_ranges(ranks)}) on {len(nodes)} node(s) ({listed})"


def _ranges(numbers: list[int]) -> str:
    """``2-5, 9``: sorted numbers with their runs collapsed."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
