"""A job for the scale tests: one small task per worker, then what each worker process costs.

Prints ``MEMORY {json}``: workers, the tasks' sum, and per worker process RSS, PSS and USS
(bytes; PSS and USS from /proc/PID/smaps_rollup through psutil).
"""

import json
import sys

import psutil
from distributed import Client


def memory() -> dict:
    info = psutil.Process().memory_full_info()
    return {"rss": info.rss, "pss": info.pss, "uss": info.uss}


def main() -> int:
    client = Client()
    n = len(client.scheduler_info(n_workers=-1)["workers"])
    total = sum(client.gather(client.map(lambda x: x + 1, range(n))))
    per_worker = list(client.run(memory).values())
    print("MEMORY " + json.dumps({"workers": n, "sum": total, "memory": per_worker}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
