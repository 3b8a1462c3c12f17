"""COMMANDs for the fault tests; each prints one ``FAULT {json}`` line.

- ``kill-worker DIR``: run a task that SIGKILLs its own worker the first time it runs (a marker
  in DIR remembers), wait for its result (rescheduled), then for the worker to come back.
- ``hold FILE``: connect, write ``{"pid": ..., "rank_pid": ...}`` to FILE, then wait for a signal.
- ``crash CODE``: connect, then exit with CODE (``abort`` dies of SIGABRT).
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

from distributed import Client
from listed import workers


def report(**data) -> None:
    print("FAULT " + json.dumps(data), flush=True)


def die_once(marker: str, x: int) -> int:
    """SIGKILL the worker that runs this the first time; return x*x on the retry."""
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def kill_worker(directory: str) -> int:
    client = Client(timeout=30)
    n = len(workers(client))
    before = sorted(client.run(os.getpid).values())
    marker = os.path.join(directory, "killed-worker")
    t0 = time.monotonic()
    result = client.submit(die_once, marker, 7, pure=False).result(timeout=60)
    t_result = time.monotonic() - t0
    client.wait_for_workers(n, timeout=60)
    t_back = time.monotonic() - t0
    after = sorted(client.run(os.getpid).values())
    report(
        result=result,
        killed=int(Path(marker).read_text()),
        workers_before=before,
        workers_after=after,
        seconds_to_result=round(t_result, 2),
        seconds_to_all_workers=round(t_back, 2),
    )
    client.close()
    return 0


def hold(file: str) -> int:
    client = Client(timeout=30)
    n = len(workers(client))
    tmp = file + ".tmp"
    Path(tmp).write_text(json.dumps({"pid": os.getpid(), "rank_pid": os.getppid(), "n": n}))
    os.replace(tmp, file)
    report(holding=True, workers=n)
    signal.pause()  # until SIGTERM (the cluster stops, or the rank died)
    return 0


def crash(code: str) -> int:
    Client(timeout=30).close()
    report(exit_at=time.time())
    if code == "abort":
        os.abort()
    return int(code)


def main() -> int:
    mode, arg = sys.argv[1], sys.argv[2]
    return {"kill-worker": kill_worker, "hold": hold, "crash": crash}[mode](arg)


if __name__ == "__main__":
    sys.exit(main())
