"""COMMAND for the node-loss tests: a computation that must outlive the loss of a rank.

``node_loss.py HOLD [RELEASE]``: starts 120 tasks of 0.2 s on every worker, writes the worker
names to HOLD (the test then kills a rank and everything it started) and prints
``NODELOSS {json}`` with the result once every task is done. With RELEASE, it ends only once
that file exists (the test writes it once the launcher has seen the loss), at most 120 s on.
"""

import json
import sys
import time
from pathlib import Path

from distributed import Client
from listed import names


def square(x: int) -> int:
    time.sleep(0.2)
    return x * x


def wait_for_release(release: str) -> None:
    deadline = time.monotonic() + 120
    while not Path(release).exists():
        if time.monotonic() > deadline:
            sys.exit(f"node_loss.py: {release} never appeared")
        time.sleep(0.1)


def main(hold: str, release: str | None = None) -> None:
    with Client() as client:
        before = names(client)
        futures = client.map(square, range(120))
        while sum(f.done() for f in futures) < 10:  # under way on every worker
            time.sleep(0.05)
        Path(hold).write_text(json.dumps({"workers": before}))
        result = sum(client.gather(futures))
        if release:
            wait_for_release(release)
        out = {"result": result, "expected": sum(x * x for x in range(120))}
        out.update(workers_before=before, workers_after=names(client))
        print("NODELOSS " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
