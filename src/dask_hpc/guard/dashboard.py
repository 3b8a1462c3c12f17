"""A dashboard only its owner opens: every HTTP route of the scheduler asks for a token.

The dashboard listens on the node's loopback, but on a shared node (login nodes, nodes shared
between jobs, another user's ssh tunnel) any local user reaches loopback, and the dashboard
shows task names, logs and the call stacks of the owner's code. Like JupyterLab, the printed
URL carries a token (kept in the owner-only scheduler file); the first request with
``?token=`` gets a cookie and is redirected to the same page without it, so the pages,
their scripts and the websocket all carry the cookie. ``Authorization: token <token>`` works
too (for scrapers). Anything else gets 403.

Dask's HTTP server is tornado's; the gate sits in front of its request routing
(``HTTPServer.request_callback``) rather than in each of Dask's and Bokeh's handlers.
"""

from __future__ import annotations

import hmac
import secrets
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from tornado import httputil

REFUSED = (
    b"dask-hpc: this dashboard is its owner's only. Open the link start-cluster printed "
    b"(it carries ?token=), or client.dashboard_link from dask_hpc.connect().\n"
)


def new_token() -> str:
    return secrets.token_urlsafe(24)


def protect(http_server: Any, token: str) -> None:
    """Put the token gate in front of ``http_server`` (a tornado HTTPServer of Dask's)."""
    http_server.request_callback = TokenGate(http_server.request_callback, token, http_server.port)


class TokenGate(httputil.HTTPServerConnectionDelegate):
    """Route a request to Dask's application only when it carries the token."""

    def __init__(self, application: Any, token: str, port: int) -> None:
        self.application = application
        self.token = token
        self.cookie = f"dask-hpc-{port}"  # cookies are per host, not per port: one per cluster

    def start_request(
        self, server_conn: object, request_conn: httputil.HTTPConnection
    ) -> httputil.HTTPMessageDelegate:
        return _GatedRequest(self, server_conn, request_conn)

    def on_close(self, server_conn: object) -> None:
        self.application.on_close(server_conn)

    def valid(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def cookie_token(self, headers: httputil.HTTPHeaders) -> str | None:
        try:
            jar = SimpleCookie(headers.get("Cookie", ""))
        except CookieError:
            return None
        morsel = jar.get(self.cookie)
        return morsel.value if morsel else None


class _GatedRequest(httputil.HTTPMessageDelegate):
    """One request: forwarded to Dask's application, redirected with a cookie, or refused."""

    def __init__(
        self, gate: TokenGate, server_conn: object, request_conn: httputil.HTTPConnection
    ) -> None:
        self.gate = gate
        self.server_conn = server_conn
        self.connection = request_conn
        self.inner: httputil.HTTPMessageDelegate | None = None
        self.head = False

    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> Any:
        assert isinstance(start_line, httputil.RequestStartLine)
        self.head = start_line.method == "HEAD"
        gate = self.gate
        url = urlsplit(start_line.path)
        query = parse_qsl(url.query, keep_blank_values=True)
        given = dict(query).get("token")
        if gate.valid(given):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = url.path + (f"?{rest}" if rest else "")
            cookie = f"{gate.cookie}={gate.token}; Path=/; HttpOnly; SameSite=Strict"
            self._respond(302, "Found", {"Location": location, "Set-Cookie": cookie})
            return None
        authorization = headers.get("Authorization", "")
        header_token = authorization[6:] if authorization.startswith("token ") else None
        if gate.valid(gate.cookie_token(headers)) or gate.valid(header_token):
            self.inner = gate.application.start_request(self.server_conn, self.connection)
            return self.inner.headers_received(start_line, headers)
        self._respond(403, "Forbidden", {"Content-Type": "text/plain"}, REFUSED)
        return None

    def _respond(self, code: int, reason: str, extra: dict[str, str], body: bytes = b"") -> None:
        headers = httputil.HTTPHeaders({"Content-Length": str(len(body)), **extra})
        start = httputil.ResponseStartLine("HTTP/1.1", code, reason)
        # A HEAD answer has no body: tornado refuses one (HTTPOutputError, a traceback in the
        # owner's log for every `curl -I` of another user's).
        self.connection.write_headers(start, headers, None if self.head else body or None)
        self.connection.finish()

    def data_received(self, chunk: bytes) -> Any:
        return self.inner.data_received(chunk) if self.inner else None

    def finish(self) -> None:
        if self.inner:
            self.inner.finish()

    def on_connection_close(self) -> None:
        if self.inner:
            self.inner.on_connection_close()
