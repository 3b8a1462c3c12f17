"""``python -m dask_hpc.batch``: the ``hpc-job`` command (print a site's batch script)."""

import sys

from ..entry import hpc_job

if __name__ == "__main__":
    sys.exit(hpc_job())
