"""COMMAND for the tests: tasks that end their worker's process, one after another.

Each task ends the process of the worker that runs it (``os._exit(3)``, as a native library
that exits would); Dask retries it on the restarted workers (``allowed-failures``: 3) until it
gives up with KilledWorker. After each, it waits until every worker is back, as under
``dask worker``. Then one more such task, and COMMAND exits
at once: the cluster ends while that worker restarts. Prints ``CRASHES {json}``.
"""

import json
import os
import sys

from distributed import Client
from listed import names


def main(rounds: int) -> None:
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
        client.submit(os._exit, 3, pure=False)  # not awaited: the cluster ends meanwhile
        print("CRASHES " + json.dumps({"workers": start, "rounds": back}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
