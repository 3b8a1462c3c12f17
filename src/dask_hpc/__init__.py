"""dask-hpc: GPU-enabled Dask clusters on supercomputers, under any HPC launcher."""

# No `from __future__` here: this runs before dask_hpc.entry cleans the search paths, and
# __future__ is a module on sys.path (not frozen) like any other.

try:  # written by setuptools-scm from the git tag when the package is built or installed
    from ._version import __version__
except ImportError:  # a source tree never built (PYTHONPATH=src): pyproject's fallback_version
    __version__ = "0.0.0"

__all__ = ["HPCCluster", "__version__", "connect"]


def connect(scheduler_file: str, **kwargs):  # type: ignore[no-untyped-def]
    """A connected ``distributed.Client`` for the cluster of ``scheduler_file`` (TLS aware).

    Parameters
    ----------
    scheduler_file
        The scheduler file start-cluster printed (``scheduler file`` in its ready block). The
        cluster's certificates sit beside it; only the user who started the cluster can read
        them.
    **kwargs
        Passed on to ``distributed.Client`` (``timeout=``, ``name=``, ...). A ``security=``
        of your own replaces the cluster's certificates.

    Returns
    -------
    distributed.Client
        Connected over mutual TLS 1.3 (or plain TCP for a ``--no-tls`` cluster); its
        ``dashboard_link`` has no token (its repr lands in notebooks, files others may
        read): open the link ``hpc-cluster links SCHEDULER_FILE`` prints once, and the
        browser keeps the token as a cookie.

    Raises
    ------
    FileNotFoundError
        No usable scheduler file at that path (none yet, unreadable, or its certificates gone).

    Examples
    --------
    >>> from dask_hpc import connect
    >>> client = connect("/home/me/.dask-hpc/dask-hpc-4242.aurora-pbs-b2c4/scheduler.json")
    >>> client.submit(sum, [1, 2]).result()
    3
    """
    from .guard.connection import connect as _connect

    return _connect(scheduler_file, **kwargs)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """``dask_hpc.HPCCluster``, imported when first used (a rank never imports it)."""
    if name == "HPCCluster":
        from .elastic import HPCCluster

        return HPCCluster
    raise AttributeError(f"module 'dask_hpc' has no attribute {name!r}")
