"""Nanny preload for the tests: on every rank but 0, the Nanny hangs while it closes.

``dask_teardown`` runs in the Nanny's event loop as it closes; blocking there stalls the whole
nanny host, SIGTERM handler included (a Nanny stuck closing).
"""

import os
import time

RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def dask_teardown(nanny) -> None:  # noqa: ANN001 - Dask's preload hook
    rank = next((os.environ[v] for v in RANK_VARIABLES if v in os.environ), "0")
    if rank != "0":
        time.sleep(3600)
