"""The oldest Dask release dask-hpc declares, from pyproject.toml (printed when run)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def oldest_dask(pyproject: Path = PYPROJECT) -> str:
    """The lower bound (``>=X``) of the ``distributed`` requirement."""
    text = pyproject.read_text()
    if tomllib is not None:
        requirements = tomllib.loads(text)["project"]["dependencies"]
    else:  # pragma: no cover
        requirements = re.findall(r'"(distributed[^"]*)"', text)
    for requirement in requirements:
        m = re.match(r"distributed\s*(?:\[[^\]]*\])?\s*(.*)$", requirement)
        low = re.search(r">=\s*([0-9][0-9.]*)", m.group(1)) if m else None
        if low:
            return low.group(1)
    raise SystemExit(f"{pyproject}: no distributed>=X requirement")


if __name__ == "__main__":
    print(oldest_dask())
