"""Another user writes whatever they like to rank 0's roll call; the cluster goes on.

With more than one rank, rank 0 listens for the other ranks (``running/roster.py``) on the
node's routable address. Before (issue 43, item 5): the token a connection presented was
compared with ``hmac.compare_digest(str, str)``, which raises on non-ASCII text, uncaught:
``b"\\xff\\n"`` (or a TLS ClientHello) ended rank 0 and the whole job. Nor was there a bound
on the time or the number of connections that never present a token.

Here, on a real two-rank MPICH launch (two emulated nodes), the other user sends garbage,
non-ASCII tokens, a ClientHello, a 1 MB line, seeded random bytes, a slow sender (a byte a
second) and 200 idle connections. Each is dropped within a bounded time, a rank joining
meanwhile is let in, the cluster computes, and the job ends with status 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from fuzz_inputs import (
    assert_no_traceback_while_serving,
    hold_idle,
    roll_call_lines,
    send_each,
    slow_sender,
)
from harness.mpi import mpich
from harness.neighbour import Neighbour
from harness.waiting import wait_for
from jobs.background import Background
from neighbour_support import QUIET
from support import start_cluster

from dask_hpc import connect
from dask_hpc.guard.connection import SchedulerInfo
from dask_hpc.running import roster

pytestmark = pytest.mark.timeout(300)

IDLE = 200  # connections that say nothing, at once
BOUND = 5.0  # seconds for rank 0 to drop a connection that sent a whole (bad) line
JOIN_BOUND = 30.0  # ... one that sends nothing, or too slowly (roster.JOIN_SECONDS: 10)


def _roll_call_connections(port: int) -> int:
    return sum(
        1 for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )  # fmt: skip


def _join_as_a_rank(address: str, token: str) -> None:
    """As the owner's rank 99 would: join with the token, hear a tick, say bye."""
    conn = roster.join(address, token, 99, 10)
    try:
        conn.setblocking(True)
        conn.settimeout(30)  # ticks come every 5 s (hpc.hung-timeout 30)
        heard = b""
        while b"tick " not in heard:
            chunk = conn.recv(64)
            assert chunk, f"rank 0 closed an authenticated rank's connection: {heard!r}"
            heard += chunk
        conn.sendall(roster.BYE)
    finally:
        conn.close()


def test_strangers_bytes_on_the_roll_call_are_dropped_and_the_cluster_goes_on(
    neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, tmp_path: Path
) -> None:
    scheduler_file = sticky / "roll-call.json"
    launch = mpich(2, hosts=["nodeA", "nodeB"], ppn=1)
    argv = [*launch, *start_cluster(), "cpu", "1", *QUIET, "--scheduler-file", str(scheduler_file)]
    run = Background(argv, owner_env, tmp_path)
    try:
        run.wait_text("Dask cluster ready", 120)
        info = SchedulerInfo.from_json(json.loads(scheduler_file.read_text()))
        address, token = info.roster, info.token
        assert address and token, info
        port = int(address.rpartition(":")[2])
        lines = roll_call_lines()
        took = neighbour.run(send_each, address, lines, 20.0, True, timeout=240)
        assert len(took) == len(lines), took  # rank 0 took every connection
        assert max(seconds for seconds, _ in took) < BOUND, took
        assert all(answer == b"" for _, answer in took), took  # and said nothing to any

        with (
            neighbour.meanwhile(hold_idle, address, IDLE, 60.0) as idle,
            neighbour.meanwhile(slow_sender, address, 60.0) as slow,
        ):
            wait_for(lambda: _roll_call_connections(port) >= 2 * 32, 30, what="idle strangers")
            _join_as_a_rank(address, token)  # not starved by them
            closed, last = idle(timeout=90)
            slow_seconds = slow(timeout=90)
        assert closed == IDLE and last is not None and last < JOIN_BOUND, (closed, last)
        assert slow_seconds is not None and slow_seconds < JOIN_BOUND, slow_seconds

        with connect(scheduler_file, timeout=30) as client:
            assert len(client.scheduler_info()["workers"]) == 2  # rank 1's worker too
            assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6
            client.shutdown()
        assert run.wait(90) == 0, run.output()
    finally:
        Background.kill_all()
    assert_no_traceback_while_serving(run.stderr)
    assert "lost" not in run.stderr and "hung" not in run.stderr, run.stderr
    said = [x for x in run.stderr.splitlines() if "roll call" in x]
    assert 1 <= len(said) <= 3, run.stderr  # rate-limited: not a line per connection
