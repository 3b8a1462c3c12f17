"""The range of Dask releases dask-hpc declares, from pyproject.toml (printed when run).

Its low end is the release the images and the main test run pin (constraints.txt); the newest
release inside it is what tests/setup/newest_dask.sh installs for tests/test_newest_dask.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def distributed_range(pyproject: Path = PYPROJECT) -> str:
    """The specifier of the ``distributed`` requirement, e.g. ``>=2026.7.1,<2026.9``."""
    text = pyproject.read_text()
    if tomllib is not None:
        requirements = tomllib.loads(text)["project"]["dependencies"]
    else:  # pragma: no cover
        requirements = re.findall(r'"(distributed[^"]*)"', text)
    for requirement in requirements:
        m = re.match(r"distributed\s*(?:\[[^\]]*\])?\s*(.*)$", requirement)
        if m and ">=" in m.group(1):
            return m.group(1).replace(" ", "")
    raise SystemExit(f"{pyproject}: no distributed>=X requirement")


if __name__ == "__main__":
    print(distributed_range())
