"""COMMAND for the node-loss tests: a computation that must outlive the loss of a rank.

``node_loss.py HOLD``: starts 120 tasks of 0.2 s on every worker, writes the worker names to
HOLD (the test then kills a rank and everything it started) and prints
``NODELOSS {json}`` with the result once every task is done.
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


def main(hold: str) -> None:
    with Client() as client:
        before = names(client)
        futures = client.map(square, range(120))
        while sum(f.done() for f in futures) < 10:  # under way on every worker
            time.sleep(0.05)
        Path(hold).write_text(json.dumps({"workers": before}))
        result = sum(client.gather(futures))
        out = {"result": result, "expected": sum(x * x for x in range(120))}
        out.update(workers_before=before, workers_after=names(client))
        print("NODELOSS " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
