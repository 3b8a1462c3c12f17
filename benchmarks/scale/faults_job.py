"""COMMAND for the fault benchmark (``faults``): many short tasks on every worker while a fault
hits the cluster, each result checked.

    python -m benchmarks.scale.faults_job --settled-dir D --sims N --tasks-per-worker T
        --task-seconds S --go FILE --lost L --out FILE --timeout SECONDS

Once every simulated worker has sent its first heartbeat (a file per simulator in D), it runs
T tasks per worker; when a fifth of them are done it writes FILE (``--go``: the benchmark's
cue for the fault), then checks every result on the cluster and waits until the scheduler has
removed the L lost workers. Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .common import wait_for


def work(i: int, seconds: float) -> int:
    time.sleep(seconds)
    return i * i


def check(values: list[int]) -> tuple[int, int]:
    """On a worker: how many results, and how many of them wrong."""
    return len(values), sum(v != i * i for i, v in enumerate(values))


def job_main(args: argparse.Namespace) -> int:
    """COMMAND: many short tasks on every worker, each result checked; writes JSON to --out."""
    from distributed import Client

    out: dict = {"error": None}
    settled = Path(args.settled_dir)
    if not wait_for(lambda: len(os.listdir(settled)) >= args.sims, args.timeout, 0.05):
        out["error"] = "the simulated workers never all sent a heartbeat"
        Path(args.out).write_text(json.dumps(out))
        return 1
    client = Client()

    def workers() -> int:
        return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.workers))

    out["workers_before"] = workers()
    tasks = round(args.tasks_per_worker * out["workers_before"])
    out["tasks"] = tasks
    out["started"] = time.time()
    futures = client.map(work, range(tasks), seconds=args.task_seconds, pure=False)
    checked = client.submit(check, futures, pure=False)
    # Running on the workers: a fifth of the tasks done. Then the fault (the benchmark waits
    # for this file).
    running = wait_for(lambda: sum(f.done() for f in futures) >= tasks // 5, args.timeout, 0.05)
    out["go"] = time.time()
    tmp = Path(args.go + ".tmp")
    tmp.write_text(str(out["go"]))
    tmp.rename(args.go)
    try:
        if not running:
            raise TimeoutError("a fifth of the tasks were not done in time")
        # Every result is checked on the cluster, by one task that depends on all of them: a
        # result that a lost worker held is computed again first, as Dask does for any task
        # that needs it. (A plain client.gather of results spread over W workers has the
        # scheduler itself open a TLS connection to each of them: at 1,000 workers, seconds of
        # its event loop spent on handshakes, which is not what this measures.)
        count, wrong = checked.result(timeout=args.timeout)
        out["done"] = time.time()
        out["wrong"] = wrong + (tasks - count)
    except Exception as error:  # noqa: BLE001 (reported in the table: the result is not right)
        out["error"] = repr(error)[:300]
    out["result_ok"] = out["error"] is None and out.get("wrong") == 0
    # The computation may end before the scheduler removed the last lost worker: wait for that
    # (the benchmark measures it at the scheduler), so COMMAND's exit starts the shutdown after.
    expected = out["workers_before"] - args.lost
    wait_for(lambda: workers() <= expected, args.timeout, 0.1)
    out["workers_after"] = workers()
    out["end"] = time.time()
    client.close()
    Path(args.out).write_text(json.dumps(out))
    return 0 if out["result_ok"] else 1


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    for name in ("sims", "lost"):
        p.add_argument(f"--{name}", type=int, required=True)
    for name in ("tasks-per-worker", "task-seconds", "timeout"):
        p.add_argument(f"--{name}", type=float, required=True)
    for name in ("settled-dir", "go", "out"):
        p.add_argument(f"--{name}", required=True)
    return job_main(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
