"""``python -m dask_hpc`` is ``start-cluster``."""

import sys

from .entry import start_cluster

if __name__ == "__main__":  # not when a worker process re-imports the main module
    sys.exit(start_cluster())
