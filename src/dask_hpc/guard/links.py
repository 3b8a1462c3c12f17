"""Links that carry a token: whole on a terminal, without the token anywhere else.

A batch job's output file is made with the user's umask (022 at most sites, so 0644: Slurm,
PBS Pro and LSF alike), and a log piped through ``tee`` is a file too. Another user who reads
the dashboard's or JupyterLab's token there gets in (JupyterLab: a terminal and kernels as
the owner). So a link is printed whole only to a terminal; elsewhere without its token, and
``hpc-cluster links SCHEDULER_FILE`` prints it whole on demand (the scheduler file is the
owner's alone).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .connection import read_scheduler_file


def without_token(url: str) -> str:
    """``url`` less its ``token=`` query parameter."""
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "token"])
    return urlunsplit(parts._replace(query=query))


def private_stream(stream: TextIO | None = None) -> bool:
    """Whether only the user reads ``stream`` (stderr by default): a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def shown(url: str, whole: bool) -> str:
    return url if whole else without_token(url)


def hint(scheduler_file: Path | str) -> str:
    """What to run for the tokens that were left out."""
    return (
        "tokens left out (this output is not a terminal, others may read it): "
        f"hpc-cluster links {scheduler_file}"
    )


def links(scheduler_file: Path) -> dict[str, str]:
    """The cluster's links with their tokens (dashboard, JupyterLab) from its scheduler file."""
    info = read_scheduler_file(scheduler_file)
    if info is None:
        raise FileNotFoundError(f"no usable scheduler file at {scheduler_file}")
    found = {"dashboard": info.dashboard_link, "jupyterlab": info.jupyter_link}
    return {name: url for name, url in found.items() if url}
