"""The console scripts' first code: the search paths made safe before anything else loads.

pip's script for ``start-cluster`` imports this module, and this module imports only what
the interpreter has built in or frozen (``sys``, ``os``, ``stat``) before
``search_paths.apply`` drops PYTHONPATH's empty, relative and shared entries: before, the
script imported ``dask_hpc.cli`` first, whose ``argparse``, ``json`` and ``tornado`` came
from a planted copy in the working directory that an empty PYTHONPATH entry names (issue 43).
What Python imports before any code of ours (pip's script's ``import re``, site's ``.pth``
files) is out of our reach: where it came from a dropped entry, nothing is started (one line,
exit 2); job scripts clean these variables before Python starts (``batch/templates``).
"""


from .guard import search_paths


def start_cluster() -> int:
    """``start-cluster``."""
    refused = search_paths.start("start-cluster")
    if refused is not None:
        return refused
    from .cli import main

    return main()


def hpc_cluster() -> int:
    """``hpc-cluster``."""
    refused = search_paths.start("hpc-cluster")
    if refused is not None:
        return refused
    from .elastic.cli import main

    return main()


def hpc_job() -> int:
    """``hpc-job``."""
    refused = search_paths.start("hpc-job")
    if refused is not None:
        return refused
    from .batch.jobcli import main

    return main()
