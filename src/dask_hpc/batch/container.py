"""The directories a job's containers bind: the site's scheduler and local directories, where
they lie outside what Apptainer binds by default.

Apptainer binds ``$HOME``, ``/tmp``, ``/var/tmp`` and the working directory into a container
unless the site's ``apptainer.conf`` says otherwise (``systems.yaml``:
``apptainer_default_binds``); anything else is the image's own read-only file system, where
start-cluster cannot make its cluster's or its workers' directories (every rank exits 2:
"not usable (not writable)"). A profile's directory elsewhere (DeepOps ``/sw/dask-hpc``,
Frontier ``/mnt/bb/$USER``, Sophia ``/local/scratch``) is bound into every rank's container
with ``--bind``. The job checks each once, before any rank starts: it must be a directory on
the node (an unset variable, a missing NVMe, a node without the site's local disk: one line,
exit 2), and a path Apptainer's bind list can hold (no comma, no colon).
"""

from __future__ import annotations

import re
import shlex

from ..sites import Site
from .launch import BINDS_VARIABLE, data

CHECK = f"""\
# The site's directories outside Apptainer's default binds, bound into every rank's container
dask_hpc_bind() {{  # DIRECTORY WHAT: a directory the ranks use, checked and added to the binds
  case "$1" in
    *,*|*:*) dask_hpc_refuse "$2 $1 has a comma or a colon, which apptainer --bind cannot take" ;;
  esac
  [ -n "$1" ] && [ -d "$1" ] || dask_hpc_refuse "$2 ($1) is not a directory on this node;" \\
    "every rank's container binds it: create it on the nodes, or run on the site's own nodes"
  {BINDS_VARIABLE}=${{{BINDS_VARIABLE}:+${BINDS_VARIABLE},}}$1
}}
{BINDS_VARIABLE}=
"""


def _bound_by_default(path: str) -> bool:
    """Whether Apptainer binds ``path`` unasked (it is one of its default binds, or in one)."""
    return any(
        path == base or path.startswith(base.rstrip("/") + "/")
        for base in data()["apptainer_default_binds"]
    )


def site_binds(site: Site) -> list[tuple[str, str]]:
    """(path as the profile writes it, what it is) of each directory to bind for ``site``."""
    wanted = (
        (site.scheduler_directory, "scheduler directory"),
        (site.local_directory, "local directory"),
    )
    out: list[tuple[str, str]] = []
    for path, what in wanted:
        if path and not _bound_by_default(path) and path not in (p for p, _ in out):
            out.append((path, what))
    return out


def _shell_word(path: str) -> str:
    """``path`` as a double-quoted shell word, its ``$VAR``s expanded in the job (an unset one
    as empty: the check names it)."""
    escaped = re.sub(r'(["\\`])', r"\\\1", path)
    return '"' + re.sub(r"\$\{?(\w+)\}?", r"${\1:-}", escaped) + '"'


def bind_lines(site: Site) -> list[str]:
    """The job's lines that check the site's directories and list them in
    ``$dask_hpc_binds``; none where the site needs no bind."""
    binds = site_binds(site)
    if not binds:
        return []
    lines = CHECK.rstrip("\n").split("\n")
    for path, what in binds:
        label = shlex.quote(f"{what} {path} of the {site.name} profile")
        lines.append(f"dask_hpc_bind {_shell_word(path)} {label}")
    return lines
