"""COMMAND for the process-tree test: how each worker's process came to be.

Prints ``TREE {json}``: per worker, its chain of ancestors (worker, forkserver, nanny host,
rank), each with its command line and the command lines of its children.
"""

import json
import os

from distributed import Client


def process_chain() -> list[dict]:
    def parent(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])

    def cmdline(pid: int) -> str:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")

    def children(pid: int) -> list[str]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if parent(int(entry)) == pid:
                        found.append(cmdline(int(entry)))
                except OSError:  # gone meanwhile
                    pass
        return found

    chain, pid = [], os.getpid()
    for _ in range(4):  # the worker, its forkserver, its nanny host, its rank
        chain.append({"pid": pid, "cmdline": cmdline(pid), "children": children(pid)})
        pid = parent(pid)
    return chain


client = Client()
print("TREE " + json.dumps(client.run(process_chain)), flush=True)
