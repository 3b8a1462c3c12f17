"""The lines of a job script that clean its search paths before any rank starts.

``guard.search_paths`` cleans them in every Python process of ours, but Python imports from
``PYTHONPATH`` before the first line of ours runs (pip's script, site's ``.pth`` files, our
package itself): in a batch job, which starts in the submit directory and inherits the
submitting shell's environment (Slurm's default ``--export=ALL``), that must happen before
Python starts. The shell is in ``templates/search_paths.sh``; the variables are
``search_paths.VARIABLES`` (one list).
"""

from __future__ import annotations

from importlib import resources

from ..guard.search_paths import VARIABLES
from .templating import Template


def lines() -> list[str]:
    """The job script's lines that drop unsafe entries of :data:`VARIABLES`."""
    text = resources.files(__package__).joinpath("templates", "search_paths.sh").read_text()
    return Template(text).substitute(variables=" ".join(VARIABLES)).rstrip("\n").split("\n")
