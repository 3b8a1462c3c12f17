"""A roll call of the ranks: each worker rank keeps one TCP connection open to rank 0.

The kernel closes it when a rank's process ends, however it ends, so rank 0 knows which
ranks are alive without polling, and can wait until the others are gone before it exits (a
launcher that kills the remaining ranks when one exits then kills nobody). A worker rank
learns the same way, at once, that rank 0 is gone; rank 0 first writes ``ended`` to the
ranks it stops waiting for, so they can tell that from a crash. A connection must first present
the cluster's token (from the scheduler file, readable by the owner only).
"""

from __future__ import annotations

import hmac
import secrets
import socket
from collections.abc import Callable

ENDED = b"ended\n"  # rank 0 to the ranks still connected when it gives up waiting for them


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
        self._ranks: dict[int, tuple[int, socket.socket]] = {}  # fd -> its rank, connection
        self.left: set[int] = set()  # ranks that connected, then went
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
            token, _, rank = buffer.decode(errors="replace").strip().partition(" ")
            if data and hmac.compare_digest(token, self.token) and rank.isdigit():
                self.alive[int(rank)] = conn
                self._ranks[fd] = (int(rank), conn)
                return
            self._drop(fd, conn)
            return
        if fd not in self._ranks:  # a lookup, not a scan: N ranks leave in O(N)
            return
        rank, conn = self._ranks[fd]
        try:
            if conn.recv(256):
                return  # ranks send nothing more; ignore
        except BlockingIOError:
            return
        del self._ranks[fd]
        if self.alive.get(rank) is conn:
            del self.alive[rank]
            self.left.add(rank)
        self._drop(fd, conn)

    def say_ended(self) -> None:
        """Tell the ranks still connected that rank 0 ends without them (best effort)."""
        for conn in self.alive.values():
            try:
                conn.send(ENDED)
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


def join(address: str, token: str, rank: int, timeout: float) -> socket.socket:
    """A worker rank's side: connect to rank 0's roster and say who we are."""
    host, _, port = address.rpartition(":")
    conn = socket.create_connection((host, int(port)), timeout=timeout)
    conn.sendall(f"{token} {rank}\n".encode())
    conn.setblocking(False)
    return conn
