"""COMMAND of the second-user tests: what every worker and the scheduler use, as they see it.

Each worker imports ``colorsys`` in a task (a planted ``colorsys.py`` on its ``sys.path``
would run there) and keeps data that Dask may spill; the line ``NEIGHBOUR {json}`` says which
file was imported and where each process's scratch space is, with its owner and mode.
"""

from __future__ import annotations

import json
import os
import stat

from distributed import Client


def where_am_i(dask_worker=None, dask_scheduler=None) -> dict:  # noqa: ANN001 - Dask's names
    import colorsys  # a planted module of this name would run here

    server = dask_worker if dask_worker is not None else dask_scheduler
    directory = server.local_directory
    info = os.stat(directory)
    return {
        "colorsys": colorsys.__file__,
        "directory": directory,
        "uid": info.st_uid,
        "mode": stat.S_IMODE(info.st_mode),
        "sys_path_0": __import__("sys").path[0],
        "sys_path": __import__("sys").path,
    }


def main() -> None:
    client = Client()  # the cluster's environment (start-cluster sets it)
    data = client.scatter(list(range(1000)), broadcast=True)  # something of the owner's
    workers = client.run(where_am_i)
    scheduler = client.run_on_scheduler(where_am_i)
    print("NEIGHBOUR " + json.dumps({"workers": workers, "scheduler": scheduler}), flush=True)
    del data
    client.close()


if __name__ == "__main__":
    main()
