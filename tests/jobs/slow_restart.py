"""Worker preload for the tests: each worker's first start is quick, every restart takes 30 s
(it sleeps in ``dask_setup``, before the worker reaches the scheduler). Marker files per worker
name: ``CRASH_MARKER.<name>`` (its first start done), ``.restarting`` (a restart has begun),
``.restarted`` (a restart got through its 30 s: nobody stopped it)."""

import os
import time


def dask_setup(worker) -> None:  # noqa: ANN001 - Dask's preload hook
    marker = f"{os.environ['CRASH_MARKER']}.{worker.name}"
    if os.path.exists(marker):
        open(f"{marker}.restarting", "w").close()
        time.sleep(30)
        open(f"{marker}.restarted", "w").close()
    open(marker, "w").close()
