"""COMMAND for the scale benchmark (``lifecycle``): an idle cluster, then a computation, probed
as a user would.

    python -m benchmarks.scale.job --settled-dir D --sims N --idle S --tasks T --fan-in F --out F

Once every simulated worker has sent its first heartbeat (a file per simulator in D), the
cluster idles for S seconds (workers dropped for missed heartbeats show up there: Dask's
``worker-ttl``), then computes a graph of T leaf tasks (``i * i``) summed by a tree of sums of
F each: a reduction without P2P, whose every level moves results between workers. The result
is checked. Meanwhile a thread times what a user's client and browser ask for: the client's
``scheduler_info()`` (every worker's identity, O(W)) and Dask's workers table (an HTML page,
O(W)) as each phase starts and every ``PROBE_EVERY`` seconds in it, and the dashboard's status
page once per phase (as a user opens it: each request makes a Bokeh session of every plot on
the scheduler's event loop, 0.5 s of its CPU at 20 workers; requested every 5 s it was most of
the loop's stalls), with the dashboard's token from the scheduler file. Writes JSON to
``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

# s between a user's probes: each costs the scheduler O(W) (at 10,000 workers ~0.8 s of its
# loop for scheduler_info, ~0.9 s for the workers page); every 5 s they were a third of an
# idle scheduler's CPU
PROBE_EVERY = 30.0
PAGES = ("/info/main/workers.html",)  # every probe
OPENED = "/status"  # once per phase


def square(i: int) -> int:
    return i * i


def add(*parts: int) -> int:
    return sum(parts)


def tree_sum(leaves: int, fan_in: int) -> tuple[dict, Any]:
    """``sum(i * i for i in range(leaves))`` as a graph: the leaves, then sums of ``fan_in``."""
    graph: dict[Any, Any] = {("square", i): (square, i) for i in range(leaves)}
    keys = [("square", i) for i in range(leaves)]
    level = 0
    while len(keys) > 1:
        level += 1
        sums = []
        for j in range(0, len(keys), fan_in):
            graph[(f"sum-{level}", j // fan_in)] = (add, *keys[j : j + fan_in])
            sums.append((f"sum-{level}", j // fan_in))
        keys = sums
    return graph, keys[0]


def dashboard_login() -> str:
    """The dashboard's link with its token, as ``hpc-cluster links`` prints it: from the
    cluster's scheduler file, the owner's alone. COMMAND's environment carries the link without
    its token (issue 43), and the probes with that one were all refused (403)."""
    from dask_hpc.guard.links import links

    directory = Path(os.environ.get("DASK_HPC__SCHEDULER_DIRECTORY", "/nonexistent"))
    found = sorted(directory.glob("*/scheduler.json"))
    return links(found[0]).get("dashboard", "") if len(found) == 1 else ""


class UserProbe(threading.Thread):
    """What a user waits for, timed as each phase starts and every ``PROBE_EVERY`` s in it."""

    def __init__(self, client: Any) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.phase = ""
        self.times: dict[str, dict[str, list[float]]] = {}  # phase -> what -> seconds
        self.done = threading.Event()
        self.woken = threading.Event()
        self.base, _, self.token = dashboard_login().partition("/status?token=")

    def timed(self, phase: str, what: str, call: Any) -> None:
        start = time.perf_counter()
        try:
            call()
        except Exception as error:  # noqa: BLE001 - a failed probe is reported, not fatal
            self.times.setdefault(phase, {}).setdefault(f"{what} failed", []).append(0.0)
            print(f"probe {what}: {error!r}", flush=True)
            return
        seconds = time.perf_counter() - start
        self.times.setdefault(phase, {}).setdefault(what, []).append(seconds)

    def get(self, page: str) -> None:
        request = urllib.request.Request(self.base + page)
        request.add_header("Authorization", f"token {self.token}")
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()

    def enter(self, phase: str) -> None:
        """Start ``phase`` (an empty one: no more probes): its first probes at once."""
        self.phase = phase
        self.woken.set()

    def run(self) -> None:
        opened = ""
        while not self.done.is_set():
            self.woken.wait(PROBE_EVERY)
            self.woken.clear()
            phase = self.phase
            if not phase or self.done.is_set():
                continue
            self.timed(phase, "scheduler_info", lambda: self.client.scheduler_info(n_workers=-1))
            if not self.base:
                continue
            if opened != phase:
                opened = phase
                self.timed(phase, OPENED, lambda: self.get(OPENED))
            for page in PAGES:
                self.timed(phase, page, lambda page=page: self.get(page))

    def summary(self) -> dict[str, dict[str, list[float]]]:
        """Per phase and probe: [median, longest] seconds, and how many."""
        return {phase: {what: [statistics.median(s), max(s), len(s)] for what, s in probes.items()}
                for phase, probes in self.times.items()}  # fmt: skip


def workers(client: Any) -> int:
    return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.workers))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--settled-dir", required=True)
    p.add_argument("--sims", type=int, required=True)
    p.add_argument("--idle", type=float, required=True)
    p.add_argument("--tasks", type=int, required=True)
    p.add_argument("--fan-in", type=int, default=10)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from distributed import Client

    out: dict[str, Any] = {"error": None}
    settled = Path(args.settled_dir)
    deadline = time.monotonic() + args.timeout
    while len(os.listdir(settled)) < args.sims:  # every simulator's workers sent a heartbeat
        if time.monotonic() > deadline:
            out["error"] = "the simulated workers never all sent a heartbeat"
            Path(args.out).write_text(json.dumps(out))
            return 1
        time.sleep(0.05)
    out["settled"] = time.time()
    client = Client(timeout=120)
    probe = UserProbe(client)
    probe.start()
    out["workers_settled"] = workers(client)
    probe.enter("idle")
    out["idle_start"] = time.time()
    time.sleep(args.idle)  # the measurement: what an idle cluster of W workers does
    out["idle_end"] = time.time()
    out["workers_after_idle"] = workers(client)
    if args.tasks:
        graph, key = tree_sum(args.tasks, args.fan_in)
        out["graph_tasks"] = len(graph)
        probe.enter("computation")
        out["submitted"] = time.time()
        try:
            value = client.get(graph, key, sync=True)
            out["done"] = time.time()
            n = args.tasks
            out["result_ok"] = value == (n - 1) * n * (2 * n - 1) // 6
        except Exception as error:  # noqa: BLE001 - reported in the table
            out["error"] = repr(error)[:300]
            out["result_ok"] = False
        out["workers_after_computation"] = workers(client)
    probe.done.set()
    probe.enter("")
    probe.join()
    out["probes"] = probe.summary()
    client.close()
    out["end"] = time.time()
    Path(args.out).write_text(json.dumps(out))
    return 0 if out["error"] is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
