"""The directories a job's containers bind: the cluster's scheduler directory and the site's
local directory, where they lie outside what Apptainer binds by default.

Apptainer binds ``$HOME``, ``/tmp``, ``/var/tmp`` and the working directory into a container
unless the site's ``apptainer.conf`` says otherwise (``systems.yaml``:
``apptainer_default_binds``); anything else is the image's own read-only file system, where
start-cluster cannot make its cluster's or its workers' directories (every rank exits 2:
"not usable (read-only file system)"). So the job binds, into every rank's container:

- the scheduler directory the ranks will use: ``$DASK_HPC__SCHEDULER_DIRECTORY`` where the
  job has it (``hpc.scheduler-directory``; a dask config file is not read here), else the
  profile's (DeepOps ``/sw/dask-hpc``, Summit ``$MEMBERWORK``);
- the profile's local directory (Frontier ``/mnt/bb/$USER``, Sophia ``/local/scratch``).

The job checks each once, before any rank starts: one under a default bind is left to
Apptainer, as is one whose variable is unset (start-cluster then falls back to ``~/.dask-hpc``
or ``/tmp``); any other must be a directory on the node (a missing NVMe: one line, exit 2) and
a path Apptainer's bind list can hold (no comma, no colon).
"""

from __future__ import annotations

import re
import shlex

from ..planning.sites import Site
from .launch import BINDS_VARIABLE, data

SCHEDULER_ENV = "DASK_HPC__SCHEDULER_DIRECTORY"  # hpc.scheduler-directory, as a rank reads it

FUNCTION = """\
# The scheduler and local directories the ranks use, bound into every rank's container where
# Apptainer does not bind them itself ({defaults}, the working directory)
dask_hpc_bind() {{  # DIRECTORY WHAT: checked, and added to the binds
  case "$1" in
    {patterns}) return 0 ;;
    *,*|*:*) dask_hpc_refuse "$2 $1 has a comma or a colon, which apptainer --bind cannot take" ;;
  esac
  # unset (start-cluster falls back to ~/.dask-hpc or /tmp), relative (the working directory)
  [ -n "$1" ] && [ "${{1#/}}" != "$1" ] || return 0
  [ -d "$1" ] || dask_hpc_refuse "$2 ($1) is not a directory on this node;" \\
    "every rank's container binds it: create it on the nodes, or run on the site's own nodes"
  {var}=${{{var}:+${var},}}$1
}}
{var}="""


def _bound_by_default(path: str) -> bool:
    """Whether Apptainer binds ``path`` unasked (it is one of its default binds, or in one)."""
    return any(
        path == base or path.startswith(base.rstrip("/") + "/")
        for base in data()["apptainer_default_binds"]
    )


def site_binds(site: Site) -> list[tuple[str, str]]:
    """(path as the profile writes it, what it is) of each of the profile's directories that
    Apptainer does not bind by default."""
    wanted = (
        (site.scheduler_directory, "scheduler directory"),
        (site.local_directory, "local directory"),
    )
    out: list[tuple[str, str]] = []
    for path, what in wanted:
        if path and not _bound_by_default(path) and path not in (p for p, _ in out):
            out.append((path, what))
    return out


def _shell_text(path: str) -> str:
    """``path`` for inside double quotes, its ``$VAR``s expanded in the job; empty where one
    of them is unset or empty, as ``Site.expand`` (``/mnt/bb/$USER``:
    ``${USER:+/mnt/bb/$USER}``)."""
    text = re.sub(r'(["\\`])', r"\\\1", path)
    names = re.findall(r"\$\{?(\w+)\}?", path)
    text = re.sub(r"\$\{?(\w+)\}?", r"${\1}", text)
    for name in reversed(dict.fromkeys(names)):
        text = f"${{{name}:+{text}}}"
    return text


def _patterns() -> str:
    """The ``case`` patterns of the paths Apptainer binds by default."""
    out = []
    for base in data()["apptainer_default_binds"]:  # an unset $HOME matches nothing
        word = '"' + re.sub(r"\$\{?(\w+)\}?", r"${\1:-/nonexistent}", base) + '"'
        out += [word, f"{word}/*"]
    return "|".join(out)


def bind_lines(site: Site) -> list[str]:
    """The job's lines that check the ranks' directories and list those to bind in
    ``$dask_hpc_binds`` (empty: nothing to bind)."""
    defaults = ", ".join(data()["apptainer_default_binds"])
    lines = FUNCTION.format(defaults=defaults, patterns=_patterns(), var=BINDS_VARIABLE)
    scheduler = site.scheduler_directory
    label = f"scheduler directory (${SCHEDULER_ENV}, else {scheduler} of the {site.name} profile)"
    calls = [f'dask_hpc_bind "${{{SCHEDULER_ENV}:-{_shell_text(scheduler)}}}" '
             f"{shlex.quote(label)}"]
    if site.local_directory and not _bound_by_default(site.local_directory):
        label = f"local directory {site.local_directory} of the {site.name} profile"
        calls.append(f'dask_hpc_bind "{_shell_text(site.local_directory)}" {shlex.quote(label)}')
    return [*lines.split("\n"), *calls]
