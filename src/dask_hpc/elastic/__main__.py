"""``python -m dask_hpc.elastic`` is ``hpc-cluster``."""

import sys

from ..entry import hpc_cluster

if __name__ == "__main__":
    sys.exit(hpc_cluster())
