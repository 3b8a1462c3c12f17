"""``python -m dask_hpc.elastic`` is ``hpc-cluster``."""

import sys

from ..guard import search_paths

if __name__ == "__main__":
    refused = search_paths.start("hpc-cluster")  # as the console script's dask_hpc.entry
    if refused is not None:
        sys.exit(refused)
    from .cli import main

    sys.exit(main())
