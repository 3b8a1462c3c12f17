"""The README's first command, run as written on stock Debian 12 and Ubuntu 24.04 Pythons.

Each target is a fresh copy of the minbase root filesystem tests/setup/ansible.sh caches
(minbase + python3: the distribution's own Python, externally managed). The only additions
are the distribution's python3-venv package (what `python3 -m venv` needs there) and this
machine's CA bundle (its HTTPS to the package index goes through a site CA).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from build_support import REPO

CACHE = Path("/var/tmp/dask-hpc-tests/ansible/rootfs")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
PI = r"pi ~= 3\.1\d+ \(error [^)]*\) from \d+ samples on 2 worker\(s\) using numpy"

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(900)]


def first_command() -> str:
    """The command under ``# 1.`` in the README's first code block."""
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    lines = block.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("# 1."))
    return lines[index + 1]


def test_first_command_is_quiet_and_in_a_venv() -> None:
    command = first_command()
    assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && ")
    assert "pip install -q ." in command


@pytest.mark.parametrize("target", ["debian12", "ubuntu2404"])
def test_first_command_on_a_stock_python(run_cmd, tmp_path: Path, target: str) -> None:
    tar = CACHE / f"{target}.tar"
    assert tar.is_file(), f"{tar} missing: run tests/setup/ansible.sh"
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["tar", "-C", str(root), "-xf", str(tar)], check=True)
    assert list(root.glob("usr/lib/python3*/EXTERNALLY-MANAGED")), "not a stock Python"
    # the source tree (no build outputs, no virtual environment, no tests/build: not needed)
    shutil.copytree(
        REPO,
        root / "src",
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "__pycache__", ".*_cache", "*.sif"
        ),
    )
    (root / "etc" / "host-ca.crt").write_bytes(HOST_CA.read_bytes())  # apt may rewrite certs/
    (root / "etc" / "resolv.conf").write_bytes(Path("/etc/resolv.conf").read_bytes())
    script = (
        "set -e\n"
        "export DEBIAN_FRONTEND=noninteractive\n"
        "apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null\n"
        "cd /src\n"
        "export PIP_CERT=/etc/host-ca.crt\n"
        f"{first_command()}\n"
    )
    (root / "readme.sh").write_text(script)
    inner = (
        f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && "
        f"exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "
        f"chroot {root} bash /readme.sh"
    )
    result = run_cmd(["unshare", "--mount", "--pid", "--fork", "sh", "-c", inner], timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert re.search(PI, result.stdout), out[-4000:]
    # quiet: pip says nothing; what is printed is the cluster's
    assert "Successfully installed" not in out and "Collecting" not in out, out[-4000:]
    assert "Dask cluster ready: 2 cpu workers" in result.stderr
