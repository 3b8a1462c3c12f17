"""dask-hpc: GPU-enabled Dask clusters on supercomputers, under any HPC launcher."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["HPCCluster", "__version__", "connect"]


def connect(scheduler_file: str, **kwargs):  # type: ignore[no-untyped-def]
    """A connected ``distributed.Client`` for the cluster of ``scheduler_file`` (TLS aware)."""
    from .connection import connect as _connect

    return _connect(scheduler_file, **kwargs)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """``dask_hpc.HPCCluster``, imported when first used (a rank never imports it)."""
    if name == "HPCCluster":
        from .elastic import HPCCluster

        return HPCCluster
    raise AttributeError(f"module 'dask_hpc' has no attribute {name!r}")
