"""COMMANDs for the hung-rank tests (tests/test_hung.py); each prints one ``HUNGJOB {json}`` line.

- ``compute HOLD RELEASE``: 120 tasks of 0.4 s over every worker; once 10 are done, the worker
  names go to HOLD (the test then stops a rank: SIGSTOP of every process it has); prints the
  result, when it came (``time.time()``) and the workers then, and waits (at most 300 s) for
  the file RELEASE before it exits, so that the test decides when the cluster ends.
- ``gil HOLD WORKER SECONDS``: a task on worker WORKER holds the GIL for SECONDS (a C call that
  does not release it: the worker's event loop, its heartbeats included, stops), while 60
  short tasks run on the others; meanwhile, how stale the scheduler's view of that worker
  grows (Dask's ``last_seen``). HOLD is written once the task runs.
"""

import ctypes
import json
import sys
import time
from pathlib import Path

import listed
from distributed import Client, get_worker
from listed import names


def report(**data) -> None:
    print("HUNGJOB " + json.dumps(data), flush=True)


def square(x: int) -> int:
    time.sleep(0.4)
    return x * x


def wait_for_file(path: str, timeout: float) -> bool:
    """Poll for ``path`` (COMMAND has no other way to hear from the test), up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def compute(hold: str, release: str) -> None:
    with Client() as client:
        before = names(client)
        futures = client.map(square, range(120))
        while sum(f.done() for f in futures) < 10:  # under way on every worker
            time.sleep(0.05)
        Path(hold).write_text(json.dumps({"workers": before}))
        result = sum(client.gather(futures))
        report(
            result=result,
            expected=sum(x * x for x in range(120)),
            result_at=time.time(),
            workers_before=before,
            workers_after=names(client),
        )
        report(released=wait_for_file(release, 300), workers_at_end=names(client))


def hold_the_gil(seconds: float) -> str:
    """Sleep in C with the GIL held: ctypes.PyDLL calls keep it (CDLL calls release it)."""
    ctypes.PyDLL(None).sleep(int(seconds))
    return str(get_worker().name)


def gil(hold: str, worker_name: str, seconds: str) -> None:
    with Client() as client:
        workers = listed.workers(client)
        before = sorted(str(w["name"]) for w in workers.values())
        address = next(a for a, w in workers.items() if str(w["name"]) == worker_name)
        others = [a for a in workers if a != address]
        busy = client.submit(hold_the_gil, float(seconds), workers=[address], pure=False)

        def staleness(dask_scheduler, address=address) -> float:
            ws = dask_scheduler.workers.get(address)
            return -1.0 if ws is None else time.time() - ws.last_seen

        while not client.run_on_scheduler(lambda dask_scheduler: bool(
                dask_scheduler.workers[address].processing)):  # fmt: skip
            time.sleep(0.05)
        Path(hold).write_text(json.dumps({"workers": before}))
        started = time.monotonic()
        small = client.map(square, range(60), workers=others, pure=False)
        stalest = 0.0
        while not busy.done():
            stalest = max(stalest, client.run_on_scheduler(staleness))
            time.sleep(0.5)
        report(
            busy=busy.result(),
            busy_seconds=round(time.monotonic() - started, 1),
            result=sum(client.gather(small)),
            expected=sum(x * x for x in range(60)),
            stalest=round(stalest, 1),
            workers_before=before,
            workers_after=names(client),
        )


if __name__ == "__main__":
    if sys.argv[1] == "compute":
        compute(*sys.argv[2:4])
    else:
        gil(*sys.argv[2:5])
