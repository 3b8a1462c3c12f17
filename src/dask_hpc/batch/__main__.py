"""``python -m dask_hpc.batch``: the ``hpc-job`` command (print a site's batch script)."""

import sys

from ..guard import search_paths

if __name__ == "__main__":
    refused = search_paths.start("hpc-job")  # as the console script's dask_hpc.entry
    if refused is not None:
        sys.exit(refused)
    from .jobcli import main

    sys.exit(main())
