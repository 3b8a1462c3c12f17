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

Dask's Bokeh dashboard is connected when the first request with the token arrives, not when
the scheduler starts: every request Dask's routes see finds it there, as Dask connects it, and a
cluster nobody looks at never imports Bokeh (``start-cluster cpu 1 -- python3 -c pass``: 0.95 ->
0.69 s of CPU, 0.79 -> 0.53 s to its end, 2 cores, 6 runs each, 2026-12-01); the first page
opened waits for that import instead (~0.3 s).

The gate reads what anyone sends, in the scheduler's event loop, so it parses it in linear
time and looks at a bounded part of it: the Cookie header is split here (``;``, then the
first ``=``), not by ``http.cookies`` (quadratic before CPython 3.11.10: CVE-2024-7592, one
62 KB request stalled the scheduler for 11 s); tokens are compared as bytes (``hmac``
raises on non-ASCII text); a target ``urlsplit`` refuses is refused. Tornado bounds the
request's head (64 KiB) before the gate sees it.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from tornado import httputil

if TYPE_CHECKING:
    from distributed import Scheduler

REFUSED = (
    b"dask-hpc: this dashboard is its owner's only. Open once the link start-cluster printed "
    b"on your terminal, or `hpc-cluster links SCHEDULER_FILE` prints (it carries ?token=); "
    b"your browser keeps the token from then on.\n"
)
MAX_COOKIE = 16_384  # characters of Cookie headers looked at (browsers send a host < 8 KiB)
MAX_QUERY = 8_192  # a longer query is not searched for ?token= (the cookie still counts)
# Dask's scheduler route we leave out: ``distributed.http.proxy`` forwards HTTP and websockets
# to workers' dashboards, which ours do not serve (``running/worker.py``: ``dashboard``
# False); its websocket path forwards to any host and port it is given, and it has had two
# advisories (deploy/advisories.yaml). Where jupyter-server-proxy is installed (the jupyter
# extra) it also imports that and aiohttp in every scheduler: `start-cluster cpu 1 -- python3
# -c pass` took 1.25 s of CPU and 1.04 s to its end with the route, 1.03 s and 0.83 s without
# (2 cores, 6 runs each, 2026-12-01).
LEFT_OUT_ROUTES = ("distributed.http.proxy",)


def new_token() -> str:
    return secrets.token_urlsafe(24)


def protect(http_server: Any, token: str, before_first: Callable[[], None] | None = None) -> None:
    """Put the token gate in front of ``http_server`` (a tornado HTTPServer of Dask's);
    ``before_first`` runs once, before the first request it lets through."""
    http_server.request_callback = TokenGate(
        http_server.request_callback, token, http_server.port, before_first
    )


def gated_scheduler(**options: Any) -> tuple[Scheduler, str]:
    """Dask's Scheduler (``options``: its arguments) serving Dask's HTTP routes less
    ``LEFT_OUT_ROUTES``, and Dask's Bokeh dashboard from the first request with the token on,
    the token gate in front before any request is served: the scheduler, not yet started, and
    its dashboard token."""
    import dask.config
    from distributed import Scheduler

    routes = dask.config.get("distributed.scheduler.http.routes", default=[])
    kept = [route for route in routes if route not in LEFT_OUT_ROUTES]
    prefix = options.pop("http_prefix", "/")
    with dask.config.set({"distributed.scheduler.http.routes": kept}):
        scheduler = Scheduler(dashboard=False, http_prefix=prefix, **options)
    token = new_token()
    protect(scheduler.http_server, token, lambda: connect_dashboard(scheduler, prefix))
    return scheduler, token


def connect_dashboard(scheduler: Scheduler, prefix: str) -> None:
    """Connect Dask's Bokeh dashboard to ``scheduler``'s HTTP application, as ``Scheduler``
    does when it starts with one; without Bokeh, Dask's page that says to install it."""
    try:
        import distributed.dashboard.scheduler as bokeh_dashboard
    except ImportError:
        from distributed.http.utils import get_handlers

        modules = ["distributed.http.scheduler.missing_bokeh"]
        routes = get_handlers(server=scheduler, modules=modules, prefix=prefix)
        scheduler.http_application.add_handlers(r".*", routes)
        return
    bokeh_dashboard.connect(
        scheduler.http_application, scheduler.http_server, scheduler, prefix=prefix
    )


def as_bytes(text: str) -> bytes:
    """``text`` (a header tornado decoded as latin-1, or a decoded query value) as bytes, for
    comparing: never raises, whatever it holds."""
    return text.encode("utf-8", "surrogatepass")


def cookie_values(headers: httputil.HTTPHeaders, name: bytes) -> Iterator[bytes]:
    """The values of the cookies called ``name`` in the first ``MAX_COOKIE`` characters of
    the Cookie headers: ``;`` between cookies, the first ``=`` in each (linear time)."""
    left = MAX_COOKIE
    for header in headers.get_list("Cookie"):
        seen, left = header[:left], left - len(header)
        for pair in as_bytes(seen).split(b";"):
            key, equals, value = pair.partition(b"=")
            if equals and key.strip() == name:
                value = value.strip()
                if len(value) >= 2 and value[:1] == value[-1:] == b'"':
                    value = value[1:-1]
                yield value
        if left <= 0:
            return


class TokenGate(httputil.HTTPServerConnectionDelegate):
    """Route a request to Dask's application only when it carries the token."""

    def __init__(
        self,
        application: Any,
        token: str,
        port: int,
        before_first: Callable[[], None] | None = None,
    ) -> None:
        self.application = application
        self.token = token
        self._token = token.encode()
        self.cookie = f"dask-hpc-{port}"  # cookies are per host, not per port: one per cluster
        self.before_first = before_first

    def let_through(self, server_conn: object, request_conn: Any) -> httputil.HTTPMessageDelegate:
        """Dask's delegate for a request that carries the token (``before_first`` run once)."""
        if self.before_first is not None:
            before_first, self.before_first = self.before_first, None
            before_first()
        return self.application.start_request(server_conn, request_conn)

    def start_request(
        self, server_conn: object, request_conn: httputil.HTTPConnection
    ) -> httputil.HTTPMessageDelegate:
        return _GatedRequest(self, server_conn, request_conn)

    def on_close(self, server_conn: object) -> None:
        self.application.on_close(server_conn)

    def valid(self, given: str | bytes | None) -> bool:
        """Is ``given`` the token? (As bytes: any text, non-ASCII included, is an answer.)"""
        if not given:
            return False
        given = as_bytes(given) if isinstance(given, str) else given
        return hmac.compare_digest(given, self._token)

    def cookie_valid(self, headers: httputil.HTTPHeaders) -> bool:
        return any(self.valid(v) for v in cookie_values(headers, self.cookie.encode()))


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
        try:
            url = urlsplit(start_line.path)
        except ValueError:  # "//[x": not a target anyone's page asks for
            self._refuse()
            return None
        query = parse_qsl(url.query, keep_blank_values=True) if len(url.query) <= MAX_QUERY else []
        given = dict(query).get("token")
        if gate.valid(given):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = url.path + (f"?{rest}" if rest else "")
            cookie = f"{gate.cookie}={gate.token}; Path=/; HttpOnly; SameSite=Strict"
            self._respond(302, "Found", {"Location": location, "Set-Cookie": cookie})
            return None
        authorization = headers.get("Authorization", "")
        header_token = authorization[6:] if authorization.startswith("token ") else None
        if gate.valid(header_token) or gate.cookie_valid(headers):
            self.inner = gate.let_through(self.server_conn, self.connection)
            return self.inner.headers_received(start_line, headers)
        self._refuse()
        return None

    def _refuse(self) -> None:
        self._respond(403, "Forbidden", {"Content-Type": "text/plain"}, REFUSED)

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
