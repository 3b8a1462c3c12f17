"""A virtual environment over the suite's own: its packages seen after the new one's own.

``python -m venv --system-site-packages`` from inside a venv gives the *base* Python's site
directory (Debian's /usr/lib/python3/dist-packages), not the venv's: the suite runs in a venv
(tests/setup/python.sh), so a ``.pth`` that adds the suite's site-packages as a site directory
(its own ``.pth`` files read too: the editable dask-hpc's path among them, after the new
environment's own packages) does what that flag did when the suite ran in a Python of its own.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def venv_over_this_python(path: Path, *, pip: bool = True) -> Path:
    """Make a venv at ``path`` that also sees this Python's packages; return its python."""
    argv = [sys.executable, "-m", "venv", str(path)] + ([] if pip else ["--without-pip"])
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    python = path / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    lines = [f"import site; site.addsitedir({directory!r})\n" for directory in ours]
    (Path(site) / "dask-hpc-suite.pth").write_text("".join(lines))
    return python
