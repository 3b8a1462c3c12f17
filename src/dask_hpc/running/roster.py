"""A roll call of the ranks: each worker rank keeps one TCP connection open to rank 0.

The kernel closes it when a rank's process ends, however it ends, so rank 0 knows which
ranks are alive without polling, and can wait until the others are gone before it exits (a
launcher that kills the remaining ranks when one exits then kills nobody). A worker rank
learns the same way, at once, that rank 0 is gone; rank 0 first writes ``ended`` to the
ranks it stops waiting for, so they can tell that from a crash. A connection must first present
the cluster's token (from the scheduler file, readable by the owner only), its rank and host.

Both ends turn on TCP keepalive: a node that dies without closing its connections (power lost,
kernel panic) is noticed within ``KEEPALIVE_IDLE + KEEPALIVE_COUNT * KEEPALIVE_INTERVAL`` s,
however busy the processes at either end are (the kernels answer the probes). A node that
hangs keeps them open (its kernel answers): with ``hpc.hung-timeout`` rank 0 sends every rank
a numbered tick (``tick N``) every few seconds, each rank answers it (``beat N``), and rank 0
gives up a rank that answered none for that long (``liveness.py``): it writes ``given-up
SECONDS`` to it and closes the connection, so that the rank, if it ever runs again, stops what
it started. What rank 0 says is read line by line (``FromRank0``).

The listener is on the node's routable address: anyone may connect and write anything. Until
a connection has presented the token it is a stranger (``_Stranger``): what it sends is bytes,
compared as bytes, never decoded first; its line is ``MAX_LINE`` bytes at most; it has
``JOIN_SECONDS`` to send it; at most ``MAX_STRANGERS`` wait at once (the oldest goes first: a
rank's own line arrives right after its connect); anything else (garbage, non-ASCII, a TLS
ClientHello, a reset) closes it, said in one line at most a minute (``_Refusals``). Nothing a
stranger does ends rank 0 or keeps a rank from joining.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import say
from .liveness import Ticks

ENDED = b"ended\n"  # rank 0 to the ranks still connected when it gives up waiting for them
STOP = b"stop\n"  # rank 0 to every rank once the scheduler closed the workers it knows
BYE = b"bye\n"  # a rank to rank 0 as it ends on its own (its workers retired or stopped)
_BEAT = re.compile(rb"beat (\d+)")  # a rank to rank 0: ``beat N``, its answer to tick N
KEEPALIVE_IDLE = 10  # seconds of silence before the first probe
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3  # probes unanswered: the peer is gone (25 s in all)
MAX_LINE = 256  # bytes of ``TOKEN RANK HOST\n`` at most (token 32, host name 64 at most)
JOIN_SECONDS = 10.0  # a connection presents its token within this, or is closed
MAX_STRANGERS = 64  # connections that have not presented the token yet, at once
REFUSALS_EVERY = 60.0  # seconds: one line at most about strangers' connections closed


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


@dataclass
class _Stranger:
    """A connection that has not presented the token yet."""

    conn: socket.socket
    peer: str
    deadline: float  # time.monotonic() by which its line must have come
    buffer: bytes = b""


class _Refusals:
    """Strangers' connections closed, said in one line at most every ``REFUSALS_EVERY`` s:
    the first at once, then how many more since, with the last one's peer and reason."""

    def __init__(self) -> None:
        self.count = 0  # closed since the last line
        self.said_at: float | None = None

    def note(self, peer: str, why: str) -> None:
        now = time.monotonic()
        self.count += 1
        if self.said_at is not None and now - self.said_at < REFUSALS_EVERY:
            return
        if self.said_at is None:
            what = f"a connection from {peer} ({why})"
        else:
            since = now - self.said_at
            what = f"{self.count} connections in {since:.0f} s (the last from {peer}: {why})"
        say(f"warning: roll call: closed {what} without the cluster's token; ranks unaffected")
        self.count, self.said_at = 0, now


def _parse_join(line: bytes, token: bytes) -> tuple[int, str] | None:
    """(rank, host) from ``TOKEN RANK HOST``, if it carries ``token`` (bytes compared with
    bytes: no text to decode or to raise on); None otherwise."""
    given, _, rest = line.strip().partition(b" ")
    rank, _, host = rest.partition(b" ")
    if not (hmac.compare_digest(given, token) and rank.isdigit() and len(rank) <= 9):
        return None
    name = "".join(c if c.isprintable() else "?" for c in host.decode(errors="replace"))
    return int(rank), name[:64] or "?"


class Roster:
    """Rank 0's side: accept ranks, remember who is connected."""

    def __init__(
        self,
        host: str,
        watch: Callable[[int, Callable[[], None]], None],
        unwatch: Callable[[int], None],
        ticks: Ticks | None = None,
    ) -> None:
        self.ticks = ticks  # the ticks each rank answered (None: no hung-rank check)
        self.given_up: list[int] = []  # ranks given up as hung, in that order
        self.token = secrets.token_hex(16)
        self._token = self.token.encode()
        self.listener = socket.create_server((host, 0), backlog=4096)
        self.listener.setblocking(False)
        self.alive: dict[int, socket.socket] = {}  # rank -> connection
        self.hosts: dict[int, str] = {}  # rank -> the host it said it runs on
        self._ranks: dict[int, tuple[int, socket.socket]] = {}  # fd -> its rank, connection
        self.left: list[int] = []  # ranks that connected, then went, in the order they went
        self.said_bye: set[int] = set()  # ranks that said they end (not lost)
        self._pending: dict[int, _Stranger] = {}  # fd -> it, oldest first
        self._refusals = _Refusals()
        self._watch, self._unwatch = watch, unwatch
        watch(self.listener.fileno(), self._accept)

    @property
    def address(self) -> str:
        host, port = self.listener.getsockname()[:2]
        return f"{host}:{port}"

    def _accept(self) -> None:
        try:
            conn, peer = self.listener.accept()
        except OSError:  # BlockingIOError: another turn took it; or aborted, or out of fds
            return
        conn.setblocking(False)
        keepalive(conn)
        self.sweep()
        if len(self._pending) >= MAX_STRANGERS:  # the oldest goes: a rank's line comes at once
            self._expire(next(iter(self._pending)), "too many connections waiting")
        fd = conn.fileno()
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._pending[fd] = _Stranger(conn, where, time.monotonic() + JOIN_SECONDS)
        self._watch(fd, lambda: self._read(fd))

    @property
    def next_deadline(self) -> float | None:
        """When the oldest connection still waiting must have presented its token."""
        oldest = next(iter(self._pending.values()), None)
        return oldest.deadline if oldest else None

    def sweep(self) -> None:
        """Close the connections whose time to present the token is over."""
        now = time.monotonic()
        while self._pending:
            fd, stranger = next(iter(self._pending.items()))
            if stranger.deadline > now:
                return
            self._expire(fd, f"nothing valid within {JOIN_SECONDS:g} s")

    def _expire(self, fd: int, why: str) -> None:
        """Close a waiting connection, unless what it sent meanwhile is a rank's line."""
        self._greet(fd)  # (a loaded rank 0 may not have read it yet)
        stranger = self._pending.pop(fd, None)
        if stranger is not None:
            self._refuse(fd, stranger, why)

    def _refuse(self, fd: int, stranger: _Stranger, why: str) -> None:
        self._refusals.note(stranger.peer, why)
        self._drop(fd, stranger.conn)

    def _greet(self, fd: int) -> None:
        """Read what a connection that has not presented the token sent: a whole line with the
        token makes it a rank's; a bad line, too long a one, the end or an error closes it."""
        stranger = self._pending[fd]
        try:
            data = stranger.conn.recv(MAX_LINE)
        except BlockingIOError:
            return
        except OSError as error:  # reset
            del self._pending[fd]
            self._refuse(fd, stranger, type(error).__name__)
            return
        stranger.buffer += data
        line, newline, rest = stranger.buffer.partition(b"\n")
        if not newline:
            if data and len(stranger.buffer) < MAX_LINE:
                return  # more to come
            del self._pending[fd]
            if data or stranger.buffer:
                why = "no line" if not data else f"a line over {MAX_LINE} bytes"
                self._refuse(fd, stranger, why)
            else:
                self._drop(fd, stranger.conn)  # connected and closed: nothing to say
            return
        del self._pending[fd]
        joined = _parse_join(line, self._token) if len(line) < MAX_LINE else None
        if joined is None:
            self._refuse(fd, stranger, "a wrong line")
            return
        rank, host = joined
        self.alive[rank] = stranger.conn
        self.hosts[rank] = host
        self._ranks[fd] = (rank, stranger.conn)
        if self.ticks is not None:
            self.ticks.joined(rank)
        if rest:
            self._heard(rank, rest)

    def _heard(self, rank: int, data: bytes) -> None:
        """What a rank wrote: ``bye``, ``beat N``."""
        if BYE in data:
            self.said_bye.add(rank)
        if self.ticks is not None:  # (a beat split over two reads: the next one counts)
            for number in _BEAT.findall(data):
                self.ticks.answer(rank, int(number))

    def _read(self, fd: int) -> None:
        if fd in self._pending:
            self._greet(fd)
            self.sweep()
            return
        if fd not in self._ranks:  # a lookup, not a scan: N ranks leave in O(N)
            return
        rank, conn = self._ranks[fd]
        try:
            data = conn.recv(256)
            if data:
                self._heard(rank, data)
                return
        except BlockingIOError:
            return
        except OSError:  # reset, or the keepalive probes went unanswered
            pass
        del self._ranks[fd]
        if self.alive.get(rank) is conn:
            del self.alive[rank]
            self.left.append(rank)
        if self.ticks is not None:
            self.ticks.forget(rank)
        self._drop(fd, conn)

    def give_up(self, ranks: list[int], seconds: float) -> None:
        """Give up ``ranks`` (hung: silent for ``seconds``): tell each (read when, if ever, it
        runs again) and close its connection; it is neither alive nor lost from now on."""
        for rank in ranks:
            conn = self.alive.pop(rank, None)
            if conn is None:
                continue
            self.given_up.append(rank)
            self._send(conn, f"given-up {seconds:.0f}\n".encode())
            try:  # nothing unread left here: the close is a FIN after that line, not a reset
                while conn.recv(4096):
                    pass
            except OSError:
                pass
            fd = conn.fileno()
            self._ranks.pop(fd, None)
            self._drop(fd, conn)

    @property
    def lost(self) -> list[int]:
        """Ranks that went without saying so: killed, or their node died."""
        return [rank for rank in self.left if rank not in self.said_bye]

    def tick(self, number: int) -> None:
        """Send tick ``number`` to every rank (each answers ``beat NUMBER``)."""
        self._say(f"tick {number}\n".encode())

    def say_ended(self) -> None:
        """Tell the ranks still connected that rank 0 ends without them (best effort)."""
        self._say(ENDED)

    def say_stop(self) -> None:
        """Tell every rank that the cluster ends: stop what the scheduler could not close."""
        self._say(STOP)

    def _say(self, message: bytes) -> None:
        for conn in self.alive.values():
            self._send(conn, message)

    @staticmethod
    def _send(conn: socket.socket, message: bytes) -> None:
        try:
            conn.send(message)
        except OSError:  # full (the rank does not read: hung) or gone: it is told otherwise
            pass

    def _drop(self, fd: int, conn: socket.socket) -> None:
        self._unwatch(fd)
        conn.close()

    def close(self) -> None:
        for fd, stranger in list(self._pending.items()):
            self._drop(fd, stranger.conn)
        self._pending.clear()
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


class FromRank0:
    """A rank's reading of what rank 0 writes on the roll call, a line at a time."""

    def __init__(self) -> None:
        self._buffer = b""
        self.stop = False  # the cluster ends: stop what the scheduler could not close
        self.ended = False  # rank 0 ends without waiting for this rank any longer
        self.tick: int | None = None  # the newest tick read, not yet answered
        self.given_up: float | None = None  # rank 0 gave this rank up after that silence

    def feed(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            word, _, value = line.decode(errors="replace").partition(" ")
            if word == STOP.strip().decode():
                self.stop = True
            elif word == ENDED.strip().decode():
                self.ended = True
            elif word == "tick" and value.isdigit():
                self.tick = int(value)
            elif word == "given-up":
                self.given_up = _seconds(value) or 0.0


def _seconds(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def answer(fd: int, said: FromRank0) -> None:
    """A rank's answer to the newest tick rank 0 sent (``said.tick``), on its roll-call
    descriptor ``fd``, if one came since the last answer."""
    if said.tick is None or said.given_up is not None:
        return
    try:
        os.write(fd, f"beat {said.tick}\n".encode())
    except OSError:  # full (rank 0 does not read) or gone: said elsewhere
        pass
    said.tick = None


def where_lost(ranks: list[int], hosts: dict[int, str], shown: int = 4) -> str:
    """``rank 2 on node3``, or for many ranks lost at once one phrase, not a line per rank
    (at 1,000 workers, 100 ranks killed printed 100 lines): ``100 ranks (2-51, 60-109) on
    100 nodes (node3, node4, node5, node6, ...)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]} on {hosts.get(ranks[0], '?')}"
    nodes = list(dict.fromkeys(hosts.get(rank, "?") for rank in ranks))
    listed = ", ".join(nodes[:shown]) + (", ..." if len(nodes) > shown else "")
    return f"{len(ranks)} ranks ({ranges(ranks)}) on {len(nodes)} node(s) ({listed})"


def ranges(numbers: list[int]) -> str:
    """``2-5, 9``: sorted numbers with their runs collapsed."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
