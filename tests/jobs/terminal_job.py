"""COMMAND for the terminal test: a P2P rechunk, a killed worker, a clean end with a task running.

Prints ``TERMINAL {json}``: the rechunk's result, the workers before and after the kill, and
the shuffle's warnings as Dask's logger still emits them in the scheduler (a handler of the
job's own catches them: only the terminal's handler leaves them out).
"""

import json
import os
import signal
import time

import dask.array as da
import listed
from distributed import Client
from listed import names


def catch_shuffle_warnings() -> None:
    """In the scheduler: keep what the shuffle's logger emits at WARNING."""
    import logging

    class Keep(logging.Handler):
        records: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            Keep.records.append(record.getMessage())

    logging.getLogger("distributed.shuffle").addHandler(Keep(logging.WARNING))
    logging.Keep = Keep  # found again by shuffle_warnings()


def shuffle_warnings() -> list[str]:
    import logging

    return logging.Keep.records


def removals(client: Client, before: list[str], now: list[str]) -> dict:
    """What the scheduler recorded of workers leaving and joining (its events), with who is
    listed now: for a failure's message."""
    events = [
        [round(when, 3), msg]
        for when, msg in client.get_events("all")
        if isinstance(msg, dict) and msg.get("action") in ("add-worker", "remove-worker")
    ]
    return {"before": before, "now": now, "events": events}


def main() -> None:
    with Client() as client:
        before = names(client)
        client.run_on_scheduler(catch_shuffle_warnings)
        x = da.ones((2000, 2000), chunks=(2000, 50))
        total = float(x.rechunk((50, 2000), method="p2p").sum().compute())
        missing = None if names(client) == before else removals(client, before, names(client))
        workers = listed.workers(client)
        victim = next((a for a, w in workers.items() if w["name"] == "0-1"), None)
        if victim is None:  # gone after the rechunk (seen once in CI): why, then stop
            print("TERMINAL " + json.dumps({"missing_after_rechunk": missing}), flush=True)
            return
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGTERM)  # local mode: the worker runs on this machine
        deadline = time.monotonic() + 150  # a restart at CI's load (~45 on 2 cores) took > 60 s
        while names(client) != before or victim in listed.workers(client):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        after = names(client)
        warnings = client.run_on_scheduler(shuffle_warnings)
        running = client.submit(time.sleep, 30, pure=False)  # still running at the end
        deadline = time.monotonic() + 60
        while running.key not in {k for ks in client.processing().values() for k in ks}:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        out = {"sum": total, "before": before, "after": after}
        out["shuffle_warnings"] = sum("initialized by task" in w for w in warnings)
        print("TERMINAL " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
