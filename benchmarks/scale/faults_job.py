"""COMMAND for the fault benchmark (``faults``): many short tasks on every worker while a fault
hits the cluster, each result checked.

    python -m benchmarks.scale.faults_job --settled-dir D --sims N --tasks-per-worker T
        --task-seconds S --go FILE --lost L --out FILE --timeout SECONDS

Once every simulated worker has sent its first heartbeat (a file per simulator in D), it runs
T tasks per worker; when a fifth of them are done it writes FILE (``--go``: the benchmark's
cue for the fault), then checks every result on the cluster and waits until the scheduler has
removed the L lost workers. Writes JSON to ``--out``, whatever happens. A call to the
scheduler whose connection times out or breaks (a stall of the scheduler's loop longer than
Dask's connect timeout: issue 46) is made again until ``--timeout``, each retry counted
(``reconnects``); past it, the error says that the connection failed, and in what call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .common import wait_for

T = TypeVar("T")


def work(i: int, seconds: float) -> int:
    time.sleep(seconds)
    return i * i


def check(values: list[int]) -> tuple[int, int]:
    """On a worker: how many results, and how many of them wrong."""
    return len(values), sum(v != i * i for i, v in enumerate(values))


STALL_ERRORS = (OSError, TimeoutError)  # a connection timed out (or broke) in a loop's stall


def stall_message(what: str, error: BaseException, waited: float) -> str:
    """The one line that says a call to the scheduler failed on its connection, and why."""
    return (f"the job's connection to the scheduler failed ({what}, after {waited:.1f} s of "
            f"retries): {error!r}"[:300])  # fmt: skip


def retried(what: str, call: Callable[[], T], deadline: float, out: dict) -> T:
    """``call()``, again while its connection times out or breaks (the scheduler's loop may
    stall longer than Dask's connect timeout: a new connection's TLS handshake waits for it),
    until ``deadline`` (time.monotonic); each retry counted in ``out["reconnects"]``, and the
    failure, if it comes, raised as a ``ConnectionError`` saying so."""
    first = time.monotonic()
    while True:
        try:
            return call()
        except STALL_ERRORS as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    stall_message(what, error, time.monotonic() - first)
                ) from None
            out["reconnects"] = out.get("reconnects", 0) + 1
            out.setdefault("reconnect_errors", []).append(f"{what}: {error!r}"[:200])
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def job_main(args: argparse.Namespace) -> int:
    """COMMAND: many short tasks on every worker, each result checked; writes JSON to --out,
    whatever happens (an error is written there, with what was measured before it)."""
    out: dict = {"error": None, "reconnects": 0}
    try:
        import dask.config
        import distributed  # noqa: F401 (its defaults: Dask's config has them once imported)

        out["connect_timeout"] = dask.config.get("distributed.comm.timeouts.connect")
        return run_job(args, out)
    except Exception as error:  # noqa: BLE001 (written to --out, the table shows it)
        out["error"] = out["error"] or repr(error)[:300]
        out["result_ok"] = False
        return 1
    finally:
        Path(args.out).write_text(json.dumps(out))


def run_job(args: argparse.Namespace, out: dict) -> int:
    """The computation; what it measures goes into ``out``."""
    from distributed import Client

    deadline = time.monotonic() + args.timeout
    settled = Path(args.settled_dir)
    if not wait_for(lambda: len(os.listdir(settled)) >= args.sims, args.timeout, 0.05):
        out["error"] = "the simulated workers never all sent a heartbeat"
        return 1
    # Dask's own connect retries within the timeout given: the job's whole time, not Dask's
    # 30 s (a Client that timed out is left half made: it is not made again here).
    client = Client(timeout=max(1.0, deadline - time.monotonic()))

    def workers() -> int:
        return retried("run_on_scheduler", lambda: client.run_on_scheduler(
            lambda dask_scheduler: len(dask_scheduler.workers)), deadline, out)  # fmt: skip

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
        # its event loop spent on handshakes, which is not what this measures.) Its result
        # comes over the client's one stream; if that stream breaks, Dask's client cancels the
        # future with "Client lost the connection to the scheduler" (raised here, reported).
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
