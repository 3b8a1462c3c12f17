"""A dashboard only its owner opens: a real HTTP client and a real browser against a cluster."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs.background import Background
from support import assert_tokens_left_out, cluster_links, start_cluster

from dask_hpc.guard.links import without_token

CHECK = Path(__file__).resolve().parent / "jobs" / "dashboard_check.py"


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def dashboard_result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("DASHBOARD "):
            return json.loads(line[len("DASHBOARD ") :])
    raise AssertionError(f"no DASHBOARD line in output:\n{stdout}")


def test_every_route_needs_the_token_and_a_browser_shows_the_status_page(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    scheduler_file = tmp_path / "shared" / "cluster.json"
    argv = [*start_cluster(), "cpu", "2", "--scheduler-file", str(scheduler_file)]
    run = Background([*argv, "--dashboard-address", "127.0.0.1:0"], cluster_env, tmp_path)
    run.wait_text("Dask cluster ready", 90)
    links = cluster_links(scheduler_file, cluster_env)
    assert_tokens_left_out(run.stderr, links)  # not a terminal: `hpc-cluster links` has it
    assert stat.S_IMODE(scheduler_file.stat().st_mode) == 0o600  # where the token is kept

    png = tmp_path / "status.png"
    check = subprocess.run(
        [sys.executable, str(CHECK), str(scheduler_file), str(png)],
        env=cluster_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert check.returncode == 0, check.stderr
    out = dashboard_result(check.stdout)
    assert out["link"] == links["dashboard"]
    # what a notebook shows (client.dashboard_link) carries no secret: the link without token
    assert out["plain"] == without_token(links["dashboard"]) and "token" not in out["plain"]
    assert set(out["stranger"].values()) == {403}, out["stranger"]
    assert out["wrong_token"] == 403
    code, location, cookie = out["with_token"]
    assert (code, location) == (302, "/status")  # the token leaves the URL for a cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert set(out["owner_cookie"].values()) == {200}, out["owner_cookie"]
    assert set(out["owner_header"].values()) == {200}, out["owner_header"]
    assert out["owner_proxy"] == 404  # past the gate: Dask's worker proxy is not served
    browser = out["browser"]
    assert browser["title"] == "Dask: Status"
    assert browser["canvases"] >= 5  # Bokeh's plots, fed through the websocket
    assert "owner's only" in browser["stranger_text"]
    assert png.stat().st_size > 20_000  # a drawn page, not a blank one

    run.signal(signal.SIGTERM)
    assert run.wait(60) == 128 + signal.SIGTERM, run.output()


def test_the_scheduler_serves_dasks_routes_but_the_worker_proxy() -> None:
    """``gated_scheduler`` (start-cluster's and HPCCluster's scheduler): the routes Dask's
    configuration names, and one a user's configuration adds, less ``distributed.http.proxy``
    (which forwards to any host and port), behind the token gate."""
    import asyncio
    import urllib.error
    import urllib.request

    import dask.config
    import distributed  # noqa: F401  (its configuration's defaults)

    from dask_hpc.guard.dashboard import gated_scheduler

    def status(url: str, token: str) -> int:
        request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    async def served() -> dict[str, int]:
        routes = dask.config.get("distributed.scheduler.http.routes")
        assert "distributed.http.proxy" in routes  # what Dask would serve
        added = [*routes, "distributed.http.scheduler.api"]  # a user's own addition
        with dask.config.set({"distributed.scheduler.http.routes": added}):
            scheduler, token = gated_scheduler(
                host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0"
            )
        async with scheduler:
            base = f"http://127.0.0.1:{scheduler.http_server.port}"
            paths = ["/health", "/api/v1", f"/proxy/{scheduler.http_server.port}/127.0.0.1/x"]
            found = {p: await asyncio.to_thread(status, base + p, token) for p in paths}
            found["no token"] = await asyncio.to_thread(status, base + "/health", "")
        return found

    found = asyncio.run(served())
    assert found["/health"] == 200 and found["/api/v1"] == 200, found
    assert found[next(p for p in found if p.startswith("/proxy/"))] == 404, found
    assert found["no token"] == 403, found


@pytest.mark.parametrize("bokeh", ["installed", "missing"])
def test_the_dashboard_is_connected_by_the_first_request_with_the_token(
    bokeh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler starts without Dask's Bokeh dashboard; a request without the token leaves
    it so; the first with the token connects it before Dask's routes see the request: /status
    is Dask's page (without Bokeh: Dask's page that says to install it)."""
    import asyncio
    import urllib.error
    import urllib.request

    from dask_hpc.guard.dashboard import gated_scheduler

    if bokeh == "missing":  # what `import distributed.dashboard.scheduler` raises without Bokeh
        monkeypatch.setitem(sys.modules, "distributed.dashboard.scheduler", None)

    def get(url: str, token: str) -> tuple[int, str]:
        request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""

    async def served() -> dict[str, object]:
        scheduler, token = gated_scheduler(
            host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0"
        )
        async with scheduler:
            base = f"http://127.0.0.1:{scheduler.http_server.port}"
            seen: dict[str, object] = {"at start": list(scheduler.http_application.applications)}
            seen["refused"] = (await asyncio.to_thread(get, base + "/status", "wrong"))[0]
            seen["after refused"] = list(scheduler.http_application.applications)
            seen["status"] = await asyncio.to_thread(get, base + "/status", token)
            seen["after"] = [type(a).__name__ for a in scheduler.http_application.applications]
            seen["again"] = (await asyncio.to_thread(get, base + "/status", token))[0]
        return seen

    seen = asyncio.run(served())
    assert seen["at start"] == [] and seen["after refused"] == [], seen
    assert seen["refused"] == 403, seen
    code, page = seen["status"]
    assert code == 200 and seen["again"] == 200, seen
    if bokeh == "installed":
        assert seen["after"] == ["DaskBokehTornado"], seen
        assert "<title>Dask Diagnostic UI</title>" in page, page[:500]
    else:
        assert seen["after"] == [], seen
        assert "Dask needs bokeh" in page, page[:500]
