"""Another user floods the owner's listeners with connections they refuse.

Before: every refused TLS handshake put one warning in the owner's terminal (and job log), so
any local user could flood it with a loop of ``nc``. Now Dask's warning is summarised per
listener process (``log_summary``): the first as Dask wrote it, then one line a minute at most
with the count and the peers. The cluster serves the owner meanwhile.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from fuzz_inputs import assert_no_traceback_while_serving
from harness.neighbour import Neighbour
from jobs.background import Background
from jobs.refused_connections import refused
from neighbour_support import QUIET
from support import start_cluster

from dask_hpc import connect

FLOOD = 60  # connections to each listener


def flood(addresses: list[str], n: int) -> dict[str, int]:
    """As the other user: ``n`` refused connections to each address (plain TCP and TLS with no
    certificate, each until the listener closes it)."""
    return {address: refused(address, n) for address in addresses}


def test_refused_handshakes_from_another_user_are_a_few_lines_and_the_cluster_serves_on(
    neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, tmp_path: Path
) -> None:
    scheduler_file = sticky / "flooded.json"
    argv = [*start_cluster(), "cpu", "1", *QUIET, "--scheduler-file", str(scheduler_file)]
    run = Background(argv, owner_env, tmp_path)
    try:
        run.wait_text("Dask cluster ready", 60)
        with connect(scheduler_file, timeout=30) as client:
            worker = next(iter(client.scheduler_info()["workers"]))
            scheduler = json.loads(scheduler_file.read_text())["address"]
            sent = neighbour.run(flood, [scheduler, worker], FLOOD, timeout=120)
            assert sent == {scheduler: FLOOD, worker: FLOOD}
            assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6  # still serving
        run.signal(signal.SIGTERM)
        assert run.wait(60) == 128 + signal.SIGTERM, run.output()
    finally:
        Background.kill_all()
    about = [x for x in run.stderr.splitlines() if "TLS handshake" in x]
    firsts = [x for x in about if "TLS handshake failed with remote" in x]
    counts = sorted(
        int(m[1]) for x in about
        if (m := re.search(r" (\d+) more TLS handshakes refused in the last \d+ s: ", x))
    )  # fmt: skip
    # Dask's first warning and one line of counts per listener: 4 lines for 120 refusals.
    assert len(about) == 4 and len(firsts) == 2, run.stderr
    assert counts == [FLOOD - 1, FLOOD - 1], run.stderr
    assert_no_traceback_while_serving(run.stderr)
