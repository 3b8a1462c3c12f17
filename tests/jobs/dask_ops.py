"""A job for the tests: what a Dask user does with a cluster's workers, reported as JSON.

Each operation is one that needs Dask's Nanny: restart, restart_workers, a NannyPlugin,
run(nanny=True), a task that ends its worker's process (KilledWorker, workers back), the
workers' logs, and last retire_workers (the retired worker's rank must end cleanly).

    python dask_ops.py N_WORKERS
"""

import json
import os
import sys
import time

from distributed import Client, KilledWorker
from distributed.diagnostics.plugin import Environ
from listed import names, workers


def back_after_restart(client: Client, n: int, restarted: set[str]) -> None:
    """Wait (60 s at most) until the scheduler lists n workers, none at a restarted address.

    Dask's restart_workers returns once the nannies' old processes are joined and the
    scheduler counts n workers, old entries included: it removes those only as it reads
    their closed streams, so right after restart() the list may be short or even empty while
    the new processes register (seen twice in CI under load: [] after restart()). A user who
    needs them all waits for them, as here."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = workers(client)
        if len(listed) >= n and not restarted & set(listed):
            return
        time.sleep(0.1)


def unless_whole(client: Client, n: int, result: dict, label: str) -> None:
    """Where a list of workers is short (a flake seen twice in CI under load), the scheduler's
    last log lines, to say which worker left or came back when."""
    if len(result[label]) != n:
        result[f"{label}_scheduler_log"] = [m for _, m in client.get_scheduler_logs(n=40)]


def main() -> int:
    n = int(sys.argv[1])
    client = Client(timeout=30)
    result: dict = {"workers": names(client), "seconds": {}}

    def timed(label: str, start: float) -> None:
        result["seconds"][label] = round(time.monotonic() - start, 2)

    start = time.monotonic()
    before = set(workers(client))
    client.restart()
    back_after_restart(client, n, before)
    result["after_restart"] = names(client)
    timed("restart", start)
    unless_whole(client, n, result, "after_restart")

    start = time.monotonic()
    first = sorted(workers(client))[0]
    client.restart_workers([first])
    back_after_restart(client, n, {first})
    result["after_restart_workers"] = names(client)
    timed("restart_workers", start)
    unless_whole(client, n, result, "after_restart_workers")

    start = time.monotonic()
    client.register_plugin(Environ({"DASK_HPC_PLUGIN_SET": "yes"}))  # a NannyPlugin: restarts
    client.wait_for_workers(n, timeout=60)
    seen = client.run(lambda: os.environ.get("DASK_HPC_PLUGIN_SET", "unset"))
    result["environ_plugin"] = sorted(set(seen.values()))
    timed("nanny_plugin", start)

    nanny_pids = client.run(os.getpid, nanny=True)
    worker_pids = client.run(os.getpid)
    result["nanny_run"] = {
        "nannies": len(nanny_pids),
        "distinct_from_workers": not set(nanny_pids.values()) & set(worker_pids.values()),
    }

    start = time.monotonic()
    try:
        client.submit(os._exit, 1, pure=False).result(timeout=120)
        result["exiting_task"] = "returned"
    except KilledWorker:
        result["exiting_task"] = "KilledWorker"
    client.wait_for_workers(n, timeout=60)
    deadline = time.monotonic() + 60  # every worker back, and answering
    while time.monotonic() < deadline:
        try:
            if len(client.run(os.getpid)) == n:
                break
        except Exception:  # noqa: BLE001 - a worker still restarting: ask again
            pass
        time.sleep(0.1)
    result["after_exiting_task"] = names(client)
    timed("exiting_task_and_back", start)

    logs = client.get_worker_logs()
    result["worker_log_lines"] = min(len(lines) for lines in logs.values())
    result["dashboard_link"] = client.dashboard_link
    result["sum"] = client.submit(sum, range(10)).result()

    start = time.monotonic()
    last = max(workers(client).items(), key=lambda kv: str(kv[1]["name"]))
    client.retire_workers([last[0]])
    result["retired"] = str(last[1]["name"])
    result["after_retire"] = names(client)
    timed("retire_workers", start)
    unless_whole(client, n - 1, result, "after_retire")
    print("DASKOPS " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
