"""A job for the tests: what a stranger and the owner get from a cluster's dashboard, as JSON.

    python dashboard_check.py SCHEDULER_FILE [SCREENSHOT.png]

The owner's link (token included) comes from ``hpc-cluster links``'s reading of SCHEDULER_FILE;
``dask_hpc.connect(SCHEDULER_FILE).dashboard_link`` (what a notebook shows) has none. A stranger
is any request without the token. With SCREENSHOT, a real headless Chromium (through
Playwright) opens the owner's link and saves the status page.
"""

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from dask_hpc import connect
from dask_hpc.guard.links import links

ROUTES = [
    "/status",
    "/workers",
    "/health",
    "/metrics",
    "/json/identity.json",
    "/info/main/workers.html",
]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003
        return None


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def screenshot(link: str, path: str) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(link)
        page.wait_for_selector("canvas", timeout=60_000)  # Bokeh drew its plots
        page.screenshot(path=path)
        shown = {"title": page.title(), "canvases": page.locator("canvas").count()}
        stranger = browser.new_page()
        stranger.goto(link.split("?")[0])
        shown["stranger_text"] = stranger.inner_text("body")
        browser.close()
    return shown


def main() -> int:
    client = connect(sys.argv[1])
    link = links(Path(sys.argv[1]))["dashboard"]
    parts = urlsplit(link)
    base = f"http://127.0.0.1:{parts.port}"
    token = parts.query.removeprefix("token=")
    result: dict = {"link": link, "plain": client.dashboard_link}
    result["stranger"] = {route: get(base + route)[0] for route in ROUTES}
    result["wrong_token"] = get(f"{base}/status?token={token[:-2]}xx")[0]
    code, headers, _ = get(f"{base}/status?token={token}")
    result["with_token"] = [code, headers.get("Location"), headers.get("Set-Cookie", "")]
    cookie = headers.get("Set-Cookie", "").split(";")[0]
    result["owner_cookie"] = {route: get(base + route, {"Cookie": cookie})[0] for route in ROUTES}
    authorization = {"Authorization": f"token {token}"}
    result["owner_header"] = {route: get(base + route, authorization)[0] for route in ROUTES}
    # Dask's worker proxy, which would forward to any host and port: not served at all
    result["owner_proxy"] = get(f"{base}/proxy/{parts.port}/127.0.0.1/status", authorization)[0]
    if len(sys.argv) > 2:
        result["browser"] = screenshot(link, sys.argv[2])
    client.close()
    print("DASHBOARD " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
