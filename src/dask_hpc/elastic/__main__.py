"""``python -m dask_hpc.elastic`` is ``hpc-cluster``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
