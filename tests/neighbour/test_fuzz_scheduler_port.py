"""Another user writes garbage to the scheduler's and a worker's TLS ports; the cluster goes on.

Those listeners are Dask's (tornado's TLS server): dask-hpc parses none of their bytes, but
the cluster is ours to keep up. The same hostile bytes as the roll call's (non-ASCII lines,
a TLS ClientHello without a certificate, a 1 MB line, seeded random bytes) go to each port,
one connection each, while 200 idle connections are held to each; each hostile connection is
closed within a bounded time, the cluster computes meanwhile, and the job ends with status 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_inputs import (
    assert_no_traceback_while_serving,
    hold_idle,
    roll_call_lines,
    send_each,
)
from harness.neighbour import Neighbour
from jobs.background import Background
from neighbour_support import QUIET
from support import start_cluster

from dask_hpc import connect

pytestmark = pytest.mark.timeout(300)

IDLE = 200
BOUND = 10.0  # seconds for a listener to close a connection that sent garbage and ended


def test_garbage_on_the_scheduler_and_worker_ports_leaves_the_cluster_computing(
    neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, tmp_path: Path
) -> None:
    scheduler_file = sticky / "ports.json"
    argv = [*start_cluster(), "cpu", "1", *QUIET, "--scheduler-file", str(scheduler_file)]
    run = Background(argv, owner_env, tmp_path)
    try:
        run.wait_text("Dask cluster ready", 90)
        lines = roll_call_lines()
        with connect(scheduler_file, timeout=30) as client:
            worker = next(iter(client.scheduler_info()["workers"]))
            scheduler = json.loads(scheduler_file.read_text())["address"]
            for address in (scheduler, worker):
                with neighbour.meanwhile(hold_idle, address, IDLE, 5.0) as idle:
                    took = neighbour.run(send_each, address, lines, 30.0, True, timeout=240)
                    assert client.submit(sum, [1, 2, 3], pure=False).result(timeout=30) == 6
                    idle(timeout=60)
                assert len(took) == len(lines), (address, took)
                assert max(seconds for seconds, _ in took) < BOUND, (address, took)
            assert len(client.scheduler_info()["workers"]) == 1
            assert client.submit(sum, [4, 5], pure=False).result(timeout=30) == 9
            client.shutdown()
        assert run.wait(90) == 0, run.output()
    finally:
        Background.kill_all()
    assert_no_traceback_while_serving(run.stderr)
