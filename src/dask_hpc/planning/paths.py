"""Where a launch keeps its files, checked before anything starts: the cluster's directory
and scheduler file (in a scheduler directory nobody else can replace files in, with nothing of
another user's under our names), and the base of each rank's private local directory.

Made and checked through ``private`` (race-free, owner-checked, no symlink followed).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import config
from ..errors import UsageError
from ..guard import private
from ..guard.namespaces import SYSTEM_STICKY
from . import launchers
from .settings import Settings
from .sites import Site, expand_vars

SCHEDULER_FIX = (
    "pass --scheduler-file in a directory only you can write (by default ~/.dask-hpc is used)"
)
LOCAL_FIX = "pass --local-directory with a directory only you can write, or a sticky one (/tmp)"


def _usable_directory(path: Path, what: str, fix: str, scratch: Sequence[str] = ()) -> Path:
    """``path``, made if missing, where we can write and nobody else can replace our files
    (``scratch``: the node's own sticky directories, ``Site.node_scratch``)."""
    private.ensure_parent(path, what, fix, scratch or SYSTEM_STICKY)
    if not os.access(path, os.W_OK | os.X_OK):  # also a read-only file system (EROFS)
        raise UsageError(f"{what} {path} is not usable (not writable)", fix)
    return path


def cluster_paths(
    settings: Settings, site: Site, rank: launchers.RankInfo, env: Mapping[str, str]
) -> tuple[Path, Path]:
    """(cluster directory, scheduler file) for this launch."""
    if settings.join:
        file = Path(settings.join).expanduser().absolute()
        return file.parent, file
    if settings.scheduler_file:
        given = given_path(settings.scheduler_file, "--scheduler-file", env)
        file = Path(given).expanduser().absolute()
        return file.parent / f"{file.stem}.dask-hpc", file
    base = config.get("scheduler-directory") or site.expand(site.scheduler_directory, env)
    if not base:
        base = str(Path.home() / ".dask-hpc")
    directory = Path(base).expanduser().absolute() / f"dask-hpc-{rank.launch_id}"
    return directory, directory / "scheduler.json"


def check_cluster_paths(cluster_dir: Path, scheduler_file: Path, first: bool) -> None:
    """A scheduler directory where nobody else can replace our files (made by rank 0), and no
    cluster directory or scheduler file of another user's under our names: every rank says so
    at once (rather than wait for a scheduler file that rank 0 refused to write)."""
    if first:
        _usable_directory(cluster_dir.parent, "scheduler directory", SCHEDULER_FIX)
    elif cluster_dir.parent.exists():
        private.check_parent(cluster_dir.parent, "scheduler directory", SCHEDULER_FIX)
    private.refuse_foreign(cluster_dir, "cluster directory", SCHEDULER_FIX)
    if scheduler_file.parent != cluster_dir:
        private.refuse_foreign(scheduler_file, "scheduler file", SCHEDULER_FIX)


def given_path(text: str, option: str, env: Mapping[str, str]) -> str:
    """A directory given on the command line with its ``$VAR``s expanded in this rank's
    environment, as a job script's shell would (dask-jobqueue's ``local_directory='$TMPDIR'``
    reaches start-cluster quoted); a UsageError naming a variable that is not set."""
    expanded = expand_vars(text, env)
    if expanded is None:
        missing = [v for v in re.findall(r"\$\{?(\w+)\}?", text) if not env.get(v)]
        raise UsageError(
            f"{option} {text}: ${missing[0]} is not set on this node",
            f"give a directory, or set {missing[0]} in the job",
        )
    return expanded


def local_base(settings: Settings, site: Site, env: Mapping[str, str]) -> Path:
    """Where each rank makes its private local directory (``private_local_directory``)."""
    local = settings.local_directory
    given = local and given_path(local, "--local-directory", env)
    text = given or site.expand(site.local_directory, env) or tempfile.gettempdir()
    path = Path(text).expanduser().absolute()
    return _usable_directory(path, "local directory", LOCAL_FIX, site.node_scratch())
