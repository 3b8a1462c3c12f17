"""Worker preload for the tests: each worker's first start is quick, every restart takes 30 s
(it sleeps in ``dask_setup``, before the worker reaches the scheduler). One marker file per
worker name (``CRASH_MARKER.<name>``) remembers the first start."""

import os
import time


def dask_setup(worker) -> None:  # noqa: ANN001 - Dask's preload hook
    marker = f"{os.environ['CRASH_MARKER']}.{worker.name}"
    if os.path.exists(marker):
        time.sleep(30)
    open(marker, "w").close()
