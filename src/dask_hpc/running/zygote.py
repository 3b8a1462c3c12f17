"""What the nanny host imports before it forks the forkserver (``forked_mp``), which forks
this rank's workers: all three share it.

1. Distributed and its required packages; for more than one worker, the host imports
   Dask's optional packages (numpy, pandas, lz4) first (``nanny_host.start_forkserver``).
2. What each worker would otherwise do for itself after the fork, every time: import its HTTP
   routes (prometheus_client), this package's worker and command-line modules (multiprocessing
   imports the parent's ``__main__`` again in each child), and read the package versions it
   sends the scheduler (``get_versions``, cached by Dask). Measured on 2 cores: 28 ms of CPU
   per worker; 64 workers connected in 4.19 s instead of 5.41 s (median of 3). Also
   tornado's default client TLS context, which tornado builds (the system's whole CA store) in
   every process on the first TLS connection it accepts, and never uses for one: 32 ms of CPU
   per worker on this machine (144 certificates).
3. ``gc.freeze()``: the processes forked from it never scan those objects again.
   Measured on 2 cores: without it, a closing worker spent ~0.15 s in garbage collection over
   the inherited objects (16 workers: 2.3 s to shut down), and every collection dirtied the
   pages they share with the forkserver.
"""

import gc
import importlib

import dask.config
from distributed.versions import get_versions, required_packages
from tornado import netutil

from dask_hpc.guard.import_path import forget_safe_path

forget_safe_path()  # a forkserver multiprocessing started: its workers get the user's env

_worker_imports = [
    *dask.config.get("distributed.worker.http.routes", default=[]),
    "dask_hpc.running.worker",
    "dask_hpc.cli",
    "multiprocessing.synchronize",
    "tornado.platform.asyncio",
]
for _name in ["distributed", *required_packages, *_worker_imports]:
    try:
        importlib.import_module(_name)
    except ImportError:
        pass
get_versions()
if callable(_tls_defaults := getattr(netutil, "_client_ssl_defaults", None)):
    _tls_defaults()  # cached by tornado (lru_cache); a tornado that built it at import has none

gc.freeze()
