"""``python -m dask_hpc.batch``: the ``hpc-job`` command (print a site's batch script)."""

import sys

from .jobcli import main

if __name__ == "__main__":
    sys.exit(main())
