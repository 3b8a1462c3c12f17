"""The user's own binds: data outside what a rank's container sees (``--bind``, ``binds=``).

A rank's container sees ``$HOME``, ``/tmp``, ``/var/tmp``, the working directory and the
directories ``batch.container`` binds for the site; a project's data on the site's parallel
file system (ALCF ``/lus/flare/projects/P``, ``/eagle/P``; OLCF ``/lustre/orion/P``) is not
there unless the job binds it. Each bind is Apptainer's ``SRC[:DST[:ro|rw]]`` (DST: where the
ranks see it, default SRC; ``ro``: read-only), SRC and DST absolute, with no comma (Apptainer
splits its bind list on commas) and no colon but the separators.

Each is checked as the profile's directories are (``batch.container``): where SRC is here when
the script is written, it must be a directory (one line, exit 2); in the job, before any rank
starts, it must be a directory on the node (one line, exit 2: a rank would otherwise fail alone,
inside its container, with Apptainer's words). A job that runs no image (``--python``, or a
site whose ranks run the job's own Python) sees every path already: a bind there is refused.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from .script import JobRequest

MODES = ("ro", "rw")
EXAMPLE = "/lus/flare/projects/MyProject:/data:ro"


@dataclass(frozen=True)
class Bind:
    """One bind: the node's SRC, seen by the ranks at DST (``ro``: read-only)."""

    source: str
    target: str
    mode: str | None = None

    def spec(self) -> str:
        """Apptainer's ``--bind`` word: ``SRC``, ``SRC:DST`` or ``SRC:DST:ro``."""
        if self.mode:
            return f"{self.source}:{self.target}:{self.mode}"
        return self.source if self.target == self.source else f"{self.source}:{self.target}"


def parse(text: str, option: str = "--bind") -> Bind:
    """``SRC[:DST[:ro|rw]]`` as a Bind, or a UsageError naming what to write."""
    fix = f"write {option} SRC[:DST[:ro]] with absolute paths, e.g. {option} {EXAMPLE}"
    if not isinstance(text, str) or not text:
        raise UsageError(f"{option} {text!r} is not a bind", fix)
    if "," in text:
        raise UsageError(
            f"{option} {text!r} has a comma, which Apptainer's bind list cannot take",
            f"give each directory its own {option}, or bind a directory whose path has none",
        )
    parts = text.split(":")
    if len(parts) > 3:
        raise UsageError(f"{option} {text!r} has more colons than SRC:DST:MODE", fix)
    source, target, mode = parts[0], parts[1] if len(parts) > 1 else parts[0], None
    if len(parts) == 3:
        mode = parts[2]
        if mode not in MODES:
            raise UsageError(f"{option} {text!r}: {mode!r} is not ro or rw", fix)
    for what, path in (("SRC", source), ("DST", target)):
        if not path.startswith("/"):
            raise UsageError(f"{option} {text!r}: {what} {path!r} is not an absolute path", fix)
    if target.rstrip("/") == "":
        raise UsageError(f"{option} {text!r} would cover the container's /", fix)
    return Bind(source, target, mode)


def parse_all(values: Sequence[str] | str | None, option: str = "--bind") -> tuple[Bind, ...]:
    """Every bind of ``values`` (one string is one bind), each checked here where SRC is
    visible; two onto one DST are refused."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    binds = tuple(parse(v, option) for v in values)
    seen: set[str] = set()
    for bind in binds:
        target = bind.target.rstrip("/")
        if target in seen:
            raise UsageError(
                f"{option}: two binds onto {bind.target}", "give each its own DST (SRC:DST)"
            )
        seen.add(target)
        check_here(bind, option)
    return binds


def check_here(bind: Bind, option: str = "--bind") -> None:
    """A SRC that exists here but is not a directory: one line now (the job would refuse it
    on every node). A SRC not here may be the nodes' own: the job checks it."""
    path = Path(bind.source)
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{option} {bind.source} is not a directory",
            f"bind the directory that holds it, e.g. {option} {path.parent}",
        )


def job_lines(binds: Sequence[Bind], option: str = "--bind") -> list[str]:
    """The job's lines that refuse, before any rank starts, a SRC that is not a directory on
    the node (self-contained: they run before the image's lines define anything)."""
    if not binds:
        return []
    sources = " ".join(shlex.quote(b.source) for b in dict.fromkeys(binds))
    said = f"dask-hpc: {option} $dask_hpc_dir is not a directory on this node"
    fix = "create it, or bind a directory of the site's shared file systems"
    return [
        f"# The user's binds ({option}): each a directory on this node, before any rank starts",
        f"for dask_hpc_dir in {sources}; do",
        f'  [ -d "$dask_hpc_dir" ] || {{ echo "{said}; {fix}" >&2; exit 2; }}',
        "done",
    ]


def with_binds(
    req: JobRequest, values: Sequence[str] | str | None, option: str = "--bind"
) -> JobRequest:
    """``req`` with the user's binds: Apptainer's ``--bind`` words in ``binds`` and their
    check in ``setup``; a UsageError for a bad one, or for a job that runs no image."""
    binds = parse_all(values, option)
    if not binds:
        return req
    from ..planning.sites import load_site

    site = load_site(req.site)
    if not (req.image or (None if req.python else site.image)):
        raise UsageError(
            f"{option}: a bind is for the ranks' containers, and this job runs none (its "
            "ranks run a Python environment on the node, which sees every path already)",
            f"leave {option} out, or give an image (--image, HPCCluster: image=)",
        )
    return dataclasses.replace(
        req,
        binds=(*req.binds, *(b.spec() for b in binds)),
        setup=(*req.setup, *job_lines(binds, option)),
    )
