"""COMMAND for the tests: tasks that end their worker's process, one after another.

Each task ends the process of the worker that runs it (``os._exit(3)``, as a native library
that exits would); Dask retries it on the restarted workers (``allowed-failures``: 3) until it
gives up with KilledWorker. After each, it waits until every worker is back, as under
``dask worker``. With IDLE seconds, the cluster is then left idle that long (past the workers'
death timeout) and a task must still run. Then one more such task, and COMMAND exits at once:
the cluster ends while that worker restarts. Prints ``CRASHES {json}``.
"""

import json
import os
import sys
import time

from distributed import Client
from listed import names


def main(rounds: int, idle: float) -> None:
    with Client() as client:
        start = names(client)
        back = []
        for _ in range(rounds):
            try:
                client.submit(os._exit, 3, pure=False).result(timeout=60)
                outcome = "returned"
            except Exception as error:  # noqa: BLE001 - KilledWorker is the expected one
                outcome = type(error).__name__
            try:
                client.wait_for_workers(len(start), timeout=60)
            except TimeoutError:
                pass
            back.append([outcome, names(client)])
        after_idle = None
        if idle:
            time.sleep(idle)  # what is tested: nothing happens while the cluster idles
            after_idle = [client.submit(sum, [1, 2], pure=False).result(timeout=30), names(client)]
        client.submit(os._exit, 3, pure=False)  # not awaited: the cluster ends meanwhile
        print(
            "CRASHES " + json.dumps({"workers": start, "rounds": back, "after_idle": after_idle}),
            flush=True,
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0)
