"""Sphinx configuration of dask-hpc's documentation (built by tests/test_docs.py, warnings fail).

Markdown pages through MyST, the theme of Dask's own projects (dask-sphinx-theme: dask-jobqueue,
dask-mpi), the API reference from docstrings (autodoc), and the start-cluster option table and
module map generated from the code (docs/_ext/dask_hpc_docs.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent / "src")]


def _version() -> str:
    """The version git gives this tree (as a build would), else the package's own."""
    done = subprocess.run(
        [sys.executable, "-m", "setuptools_scm", "-c", str(DOCS.parent / "pyproject.toml")],
        capture_output=True,
        text=True,
    )
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip().splitlines()[-1]
    import dask_hpc

    return dask_hpc.__version__


project = "dask-hpc"
author = "dask-hpc developers"
copyright = "dask-hpc developers"  # noqa: A001
release = _version()
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "dask_hpc_docs",
]
source_suffix = {".md": "markdown"}
# Built from the repository root (sphinx-build -c docs . OUT): the READMEs of containers/,
# ansible/ and spack/ and the changelog are pages of the site as they are, and a link to one
# works the same on the site and on GitHub.
root_doc = "docs/index"
include_patterns = [
    "README.md",
    "docs/**.md",
    "CHANGELOG.md",
    "containers/README.md",
    "ansible/README.md",
    "spack/README.md",
]
# Not even walked: build outputs (a whole Debian root filesystem), virtual environments, .git
exclude_patterns = ["docs/_build", "build", "deploy/build", ".*", "**/__pycache__"]
# Links between pages are checked: a missing page or heading anchor is a warning, and the build
# runs with -W (warnings are errors) and -n (every Python reference must resolve).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
nitpicky = True
nitpick_ignore = [
    # Only named in signatures; Dask's and Python's own objects resolve through intersphinx
    # inventories, which CI cannot fetch (no network): the reference text stays, unlinked.
    ("py:class", "distributed.Client"),
    ("py:class", "distributed.client.Client"),
    ("py:class", "os.PathLike"),
]
suppress_warnings = ["intersphinx.external"]
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_google_docstring = False

html_theme = "dask_sphinx_theme"
html_title = f"dask-hpc {release}"
# The theme's default sends page views to Dask's own Google Tag Manager account: not ours.
html_theme_options = {"google_tag_manager_id": ""}
html_static_path: list[str] = []
html_extra_path = ["_root"]  # index.html at the site's root: a link to docs/index.html
