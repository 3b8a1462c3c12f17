"""Where an elastic cluster lives: its batch system, the interface it listens on, and its
directories (the cluster's files, its jobs' output), each checked before anything is made or
submitted (``private``: no directory another user can change)."""

from __future__ import annotations

import os
from pathlib import Path

from .. import config
from ..batch import commands
from ..errors import UsageError
from ..guard import private
from ..planning.sites import Site

DIRECTORY_FIX = "pass directory= naming a directory only you can write, which the nodes share"
LOG_FIX = "pass log_directory= naming a directory only you can write"


def batch_system(site: Site, asked: str | None) -> str:
    """The batch system asked for, configured, the site's, or the one on PATH."""
    name = asked or config.get("cluster.batch-system")
    if not name and site.batch_system != "none":
        name = site.batch_system
    name = name or commands.detect()
    if not name:
        raise UsageError(
            "no batch system here: none of sbatch, qsub or bsub is on PATH, and no Flux "
            "instance (FLUX_URI)",
            "run on a login node of the cluster, or pass batch_system=",
        )
    return str(name)


def site_interface(site: Site) -> str | None:
    """The site's network interface, where this node has it."""
    import psutil

    wanted = site.network_interface
    return wanted if wanted and wanted in psutil.net_if_addrs() else None


def cluster_directory(site: Site, cluster_id: str, asked: str | os.PathLike[str] | None) -> Path:
    """The cluster's directory (made at start), in a base where nobody else can replace it."""
    base = asked or config.get("scheduler-directory")
    base = base or site.expand(site.scheduler_directory, os.environ)
    base = Path(base or Path.home() / ".dask-hpc").expanduser().absolute()
    private.ensure_parent(base, "directory for the cluster's files", DIRECTORY_FIX)
    return base / f"dask-hpc-{cluster_id}"


def log_directory(directory: Path, asked: str | os.PathLike[str] | None) -> Path:
    """Where the jobs' output goes: the cluster's own ``logs``, or the user's directory, made
    now or checked (the user's, nobody else can write it)."""
    asked = asked or config.get("cluster.log-directory")
    if not asked:
        return directory / "logs"
    path = Path(asked).expanduser().absolute()
    private.ensure_parent(path.parent, "log directory's parent", LOG_FIX)
    return private.own_directory(path, "log directory", LOG_FIX, private=False)
