"""Hostile bytes for the listeners' fuzz tests, and the other user's ways of sending them.

Every set is bounded and deterministic in kind (random bytes from a fixed seed; the TLS
ClientHello is a real one from Python's ssl module, its random fields fresh each run). The
senders run as the other user (``Neighbour.run`` / ``meanwhile``), only to the addresses the
test gives them (this machine's own), each connection bounded in time.
"""

from __future__ import annotations

import random
import selectors
import socket
import ssl
import time

SEED = 43
MB_LINE = b"A" * (1 << 20) + b"\n"  # a 1 MB line
BIG_COOKIE = 62_000  # bytes of a Cookie header: tornado takes up to 64 KiB of headers


def client_hello() -> bytes:
    """The first bytes a TLS client sends (a real ClientHello from Python's ssl module)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="dask-hpc.invalid")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:  # it waits for the server's answer: the hello is written
        pass
    hello = outgoing.read()
    assert hello[:1] == b"\x16", hello[:16]  # a TLS handshake record
    return hello


def random_bytes(count: int, longest: int, seed: int = SEED) -> list[bytes]:
    """``count`` seeded random byte strings of 1 to ``longest`` bytes."""
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(1, longest + 1)) for _ in range(count)]


def roll_call_lines() -> list[bytes]:
    """What a stranger may write to rank 0's roll call instead of ``TOKEN RANK HOST``."""
    fixed = [
        b"\xff\n",  # the red team's: ended rank 0 (compare_digest on non-ASCII text)
        b"\n",
        b"\r\n\r\n\r\n",
        b" \n",
        "ü".encode() * 16 + b" 1 nodeX\n",  # a non-ASCII token
        "\u0663".encode() * 32 + b" 1 nodeX\n",
        b"0" * 32 + b" 1 nodeX\n",  # well formed, the wrong token
        b"0" * 32 + b" \xb9\xb2 nodeX\n",
        b"\x00" * 300,
        b"\xff" * 199,  # no newline: then the end of the connection
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        client_hello(),
        MB_LINE,
    ]
    return fixed + random_bytes(24, 600)


def http_requests(port: int) -> list[bytes]:
    """Whole requests without the token for the dashboard's gate (``Connection: close``):
    the first four are 62 KB Cookie headers (the first, CVE-2024-7592's quadratic case)."""
    host = f"Host: 127.0.0.1:{port}\r\n".encode()

    def get(*headers: bytes, target: bytes = b"/status") -> bytes:
        start = b"GET " + target + b" HTTP/1.1\r\n" + host + b"Connection: close\r\n"
        return start + b"".join(headers) + b"\r\n"

    name = f"dask-hpc-{port}".encode()
    half = BIG_COOKIE // 2
    return [
        get(b'Cookie: a="' + b"\\\\" * half + b'"\r\n'),
        get(b"Cookie: " + name + b'="' + b'\\"' * half + b'"\r\n'),
        get(b"Cookie: " + b";" * BIG_COOKIE + b"\r\n"),
        get(b"Cookie: " + name + b"=" + b"=" * BIG_COOKIE + b"\r\n"),
        get(b"Cookie: " + name + b"=\xff\xfe\xfd; " + name + b"=\xc3\xbc\r\n"),
        get(b"Cookie: \x00\x01\x02\r\n"),
        get(b"Authorization: token \xff\xfe\r\n"),
        get(b"Authorization: token " + b"\\" * BIG_COOKIE + b"\r\n"),
        get(target=b"/status?token=%FF%FE%00"),
        get(target=b"/status?token=" + b"%" * 30_000 + b"&" * 30_000),
        get(target=b"/\xff\xfe?token=\xff"),
        get(target=b"//[x/status?token=1"),  # urlsplit raises on it
    ]


def garbage() -> list[bytes]:
    """Bytes that are no HTTP request (sent, then the end of the connection's writes)."""
    return [b"\xff\xfe\r\n\r\n", b"\r\n" * 1000, client_hello(), *random_bytes(12, 600)]


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    return host.strip("[]"), int(port)


def send_each(
    address: str, payloads: list[bytes], limit: float, end_writes: bool
) -> list[tuple[float, bytes]]:
    """As the other user: each payload on a connection of its own (then, with
    ``end_writes``, the end of what it sends), read until the listener closes it: (seconds,
    the first bytes of its answer) each. Stops at the first one still open after ``limit``
    s (its seconds: ``limit``)."""
    took: list[tuple[float, bytes]] = []
    for payload in payloads:
        start, answer = time.monotonic(), b""
        with socket.create_connection(_split(address), timeout=limit) as sock:
            try:
                sock.sendall(payload)
                if end_writes:
                    sock.shutdown(socket.SHUT_WR)
                while chunk := sock.recv(65536):
                    answer = (answer + chunk)[:64]
            except TimeoutError:
                took.append((limit, answer))
                return took
            except OSError:  # reset or a broken pipe: closed by the listener
                pass
        took.append((time.monotonic() - start, answer))
    return took


def slow_sender(stop_fd: int, address: str, limit: float) -> float | None:
    """As the other user, while the test goes on: one byte a second, never a newline, until
    the listener closes the connection (its seconds) or ``limit`` s passed (None); it ends
    on its own (the test's stop, ``stop_fd``, waits for that)."""
    start = time.monotonic()
    with socket.create_connection(_split(address), timeout=5) as sock:
        sock.settimeout(1.0)
        while time.monotonic() - start < limit:
            try:
                sock.send(b"x")
                if not sock.recv(64):  # (waits a second at most)
                    return time.monotonic() - start
            except TimeoutError:
                continue  # a second of silence from the listener: the next byte
            except OSError:  # reset: closed
                return time.monotonic() - start
    return None


def hold_idle(stop_fd: int, address: str, count: int, limit: float) -> tuple[int, float | None]:
    """As the other user, while the test goes on: ``count`` connections that say nothing,
    held until the listener closed them all or ``limit`` s passed (it ends on its own: the
    test's stop, ``stop_fd``, waits for that): (how many it closed, the seconds until the
    last was closed; None if some were left open)."""
    start = time.monotonic()
    selector = selectors.DefaultSelector()
    for _ in range(count):
        sock = socket.create_connection(_split(address), timeout=5)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    closed, last = 0, None
    while closed < count and time.monotonic() - start < limit:
        for key, _ in selector.select(0.2):
            sock = key.fileobj
            try:
                data = sock.recv(64)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                selector.unregister(sock)
                sock.close()  # type: ignore[union-attr]
                closed, last = closed + 1, time.monotonic() - start
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    selector.close()
    return closed, last if closed == count else None


def assert_no_traceback_while_serving(stderr: str) -> None:
    """No traceback while the cluster served the owner (up to the owner's shutdown); after
    it, only Dask's own nanny close race, which these tests met twice at load in CI
    (CancelledError in ``Nanny.close``'s ``rpc.close``, distributed/nanny.py, after the
    scheduler was shut down): none through code of ours."""
    before, _, after = stderr.partition("start-cluster: the scheduler was shut down")
    assert "Traceback" not in before, stderr
    for trace in after.split("Traceback (most recent call last):")[1:]:
        assert "dask_hpc" not in trace, stderr
        assert "distributed/nanny.py" in trace and "CancelledError" in trace, stderr
