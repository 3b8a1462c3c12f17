"""Worker preload for the tests: each worker's first start works, every restart exits at once.

It exits in ``dask_setup``, which Dask runs while the worker starts, before it connects. One
marker file per worker name (``CRASH_MARKER.<name>``) remembers the first start.
"""

import os


def dask_setup(worker) -> None:  # noqa: ANN001 - Dask's preload hook
    marker = f"{os.environ['CRASH_MARKER']}.{worker.name}"
    if os.path.exists(marker):
        os._exit(3)
    open(marker, "w").close()
