"""Talking to JupyterLab as a browser and a notebook do (importable as ``jupyter_support``):
HTTP without following redirects, and code run in a kernel over Jupyter's websocket."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid


def http(url: str, method: str = "GET", token: str | None = None) -> tuple[int, str]:
    """(status, body) without following redirects."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


async def execute(port: int, kernel: str, token: str, code: str, timeout: float = 60) -> str:
    """Run ``code`` in a kernel over Jupyter's websocket protocol; return its stdout."""
    from tornado.websocket import websocket_connect

    url = f"ws://127.0.0.1:{port}/api/kernels/{kernel}/channels?token={token}"
    ws = await websocket_connect(url)
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "test"}
    header.update(session=uuid.uuid4().hex, date="", version="5.3")
    content = {"code": code, "silent": False, "store_history": False, "allow_stdin": False}
    content.update(user_expressions={}, stop_on_error=True)
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    ws.write_message(json.dumps({**message, "channel": "shell"}))
    out = []

    async def read() -> None:
        while True:
            raw = await ws.read_message()
            assert raw is not None, "the kernel's websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                out.append("\n".join(msg["content"]["traceback"]))
            elif kind == "execute_reply":
                return

    try:
        await asyncio.wait_for(read(), timeout)
    finally:
        ws.close()
    return "".join(out)
