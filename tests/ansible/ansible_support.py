"""Helpers for the Ansible role's tests: real ansible-playbook runs against debootstrap'd root
filesystems (Debian 12, Ubuntu 22.04) through the community.general chroot connection.

tests/setup/ansible.sh prepares the cache (root filesystem tarballs, dependency wheels, the
community.general collection); each test session unpacks fresh targets from it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
SITE = ANSIBLE_DIR / "site.yml"
CACHE = Path(os.environ.get("DASK_HPC_ANSIBLE_CACHE", "/var/tmp/dask-hpc-tests/ansible"))
COLLECTIONS = CACHE / "collections"
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.M,
)
TIMINGS: dict[str, float] = {}


@dataclass
class Target:
    """One root filesystem converged as one inventory host."""

    name: str
    tarball: str
    python_tag: str
    group: str  # slurm-node or slurm-master
    hostvars: dict[str, object] = field(default_factory=dict)
    root: Path = Path()


@dataclass
class PlaybookRun:
    """The outcome of one ansible-playbook run."""

    args: list[str]
    returncode: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP counters per host."""
        return {
            m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in RECAP.finditer(self.output)
        }

    def describe(self) -> str:
        """The command and the tail of its output, for assertion messages."""
        return f"$ {' '.join(self.args)}\n(rc={self.returncode})\n{self.output[-6000:]}"


def require_setup() -> None:
    """Fail loudly when tests/setup/ansible.sh has not prepared what the tests need."""
    missing = [
        str(p)
        for p in (
            COLLECTIONS / "ansible_collections/community/general/plugins/connection/chroot.py",
            CACHE / "rootfs/debian12.tar",
            CACHE / "rootfs/ubuntu2204.tar",
            CACHE / "wheels/cp311",
            CACHE / "wheels/cp310",
        )
        if not p.exists()
    ]
    for tool in ("ansible-playbook", "ansible-lint"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if os.geteuid() != 0:
        missing.append("root (chroot needs it)")
    if missing:
        pytest.fail(
            "missing for the Ansible tests: " + ", ".join(missing) + "; run tests/setup/ansible.sh",
            pytrace=False,
        )


def ansible_env(workdir: Path) -> dict[str, str]:
    """Environment for ansible-playbook: our collection path, no colours, no stray config."""
    cfg = workdir / "ansible.cfg"
    cfg.write_text(
        "[defaults]\n"
        f"collections_path = {COLLECTIONS}\n"
        "forks = 4\n"
        "pipelining = True\n"
        f"roles_path = {ANSIBLE_DIR / 'roles'}\n"
        "interpreter_python = auto_silent\n"
        f"local_tmp = {workdir / 'ansible-local'}\n"
    )
    # PIP_* settings of this machine would leak into the chroot targets.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        ANSIBLE_CONFIG=str(cfg),
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def run_playbook(
    workdir: Path, inventory: Path, *extra: str, playbook: Path = SITE, timeout: float = 540
) -> PlaybookRun:
    """Run ansible-playbook for real and capture its output."""
    args = ["ansible-playbook", "-i", str(inventory), str(playbook), *extra]
    start = time.monotonic()
    proc = subprocess.run(
        args,
        cwd=workdir,
        env=ansible_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(args, proc.returncode, proc.stdout, time.monotonic() - start)


LIVE_SYSCTLS = ("net/core/somaxconn", "net/ipv4/tcp_max_syn_backlog", "user/max_user_namespaces")


def run_base() -> Path:
    """Where a session's targets live: a tmpfs when there is room (dpkg's many fsyncs and the
    clean-up of ~1 GB of small files cost minutes on a busy disk), else the cache directory."""
    override = os.environ.get("DASK_HPC_ANSIBLE_RUNDIR")
    if override:
        return Path(override)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize > 4 << 30 and not st.f_flag & os.ST_NOEXEC:
            return shm
    return CACHE


def live_sysctls() -> dict[str, str]:
    """This machine's live values of the sysctls the role writes (a chroot must not change them)."""
    return {k: (Path("/proc/sys") / k).read_text().strip() for k in LIVE_SYSCTLS}


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Env:
    """Everything one test session converges: targets, inventory, artefacts."""

    workdir: Path
    inventory: Path
    targets: dict[str, Target]
    wheel: Path
    image: Path
    image_url: str
    fresh: Target
    fresh_inventory: Path
    converge: PlaybookRun | None = None
    live_sysctl_before: dict[str, str] = field(default_factory=dict)
