"""A job for the scale tests: one small task per worker, then what each worker process costs.

Prints ``MEMORY {json}``: workers, the tasks' sum, and per worker process RSS, PSS and USS
(bytes; PSS and USS from /proc/PID/smaps_rollup through psutil), and the same for each rank's
nanny host (the process holding that rank's Nannies).
"""

import json
import sys

import psutil
from distributed import Client
from listed import workers


def memory() -> dict:
    info = psutil.Process().memory_full_info()
    return {"pid": psutil.Process().pid, "rss": info.rss, "pss": info.pss, "uss": info.uss}


def main() -> int:
    client = Client()
    n = len(workers(client))
    total = sum(client.gather(client.map(lambda x: x + 1, range(n))))
    per_worker = list(client.run(memory).values())
    hosts = {m["pid"]: m for m in client.run(memory, nanny=True).values()}  # a host per rank
    out = {"workers": n, "sum": total, "memory": per_worker, "nanny_hosts": list(hosts.values())}
    print("MEMORY " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
