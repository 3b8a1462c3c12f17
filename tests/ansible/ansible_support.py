"""Helpers for the Ansible role's tests: real ansible-playbook runs against minbase root
filesystems (Debian 12, Ubuntu 22.04, Ubuntu 24.04) through the community.general chroot
connection, and commands run inside them as on a real node.

tests/setup/ansible.sh prepares the cache (root filesystem tarballs, a wheelhouse, the
community.general collection); each test session unpacks fresh targets from it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
SITE = ANSIBLE_DIR / "site.yml"
CACHE = Path(os.environ.get("DASK_HPC_ANSIBLE_CACHE", "/var/tmp/dask-hpc-tests/ansible"))
COLLECTIONS = CACHE / "collections"
TARBALLS = ("debian12.tar", "ubuntu2204.tar", "ubuntu2404.tar")
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.M,
)
# ansible-core as DeepOps pins it (scripts/setup.sh: Ansible 10.7.0, ansible-core 2.17), in a
# venv of its own made by tests/setup/ansible.sh; the newest is the one on PATH.
CORE_217 = CACHE / "venv-ansible-core-2.17"
CORES = {"2.17": CORE_217 / "bin", "newest": None}
# DeepOps' ansible.cfg (NVIDIA/deepops), what ansible-playbook run from a DeepOps checkout reads,
# less its paths into that checkout (roles, collections: the tests' own come below).
DEEPOPS_CFG = {
    "inventory": "./config/inventory",
    "host_key_checking": "False",
    "gathering": "smart",
    "fact_caching": "jsonfile",
    "fact_caching_connection": "{workdir}/ansible_cache",
    "fact_caching_timeout": "86400",
    "deprecation_warnings": "False",
    "stdout_callback": "ansible.builtin.default",
    "result_format": "yaml",
    "bin_ansible_callbacks": "True",
    "forks": "25",
    "force_valid_group_names": "ignore",
    "ansible_python_interpreter": "/usr/bin/python3",
}
TIMINGS: dict[str, float] = {}
# This machine's settings that a chroot target would inherit through the chroot connection (a
# real node, reached over SSH, would not): pip's and the TLS libraries' CA and index settings.
HOST_ONLY_ENV = ("PIP_", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
# What the role creates on a node; none of it may appear on a node that --check or a refused
# run touched.
ROLE_PATHS = (
    "sw",
    "shared",
    "opt/dask-hpc",
    "usr/share/deepops",
    "etc/dask",
    "etc/ansible/facts.d/dask_hpc.fact",
    "etc/sysctl.d/90-dask-hpc.conf",
    "etc/security/limits.d/90-dask-hpc.conf",
    "usr/local/bin/start-cluster",
)


@dataclass
class Target:
    """One root filesystem converged as one inventory host."""

    name: str
    tarball: str
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

    def changed_tasks(self) -> list[str]:
        """The names of the tasks that reported a change."""
        names, current = [], ""
        for line in self.output.splitlines():
            if line.startswith("TASK ["):
                current = line[6:].split("]", 1)[0]
            elif line.startswith("changed: ") and current not in names:
                names.append(current)
        return names

    def describe(self) -> str:
        """The command and the tail of its output, for assertion messages."""
        return f"$ {shlex.join(self.args)}\n(rc={self.returncode})\n{self.output[-6000:]}"


def require_setup() -> None:
    """Fail loudly when tests/setup/ansible.sh has not prepared what the tests need."""
    missing = [
        str(p)
        for p in (
            COLLECTIONS / "ansible_collections/community/general/plugins/connection/chroot.py",
            *(CACHE / "rootfs" / t for t in TARBALLS),
            CACHE / "wheels/cp311",
            CORE_217 / "bin/ansible-playbook",
        )
        if not p.exists()
    ]
    tools = ("ansible-playbook", "ansible-lint", "dpkg-deb", "unshare", "nsenter", "ip", "sshfs")
    for tool in tools:
        if shutil.which(tool) is None:
            missing.append(tool)
    if os.geteuid() != 0:
        missing.append("root (chroot needs it)")
    if missing:
        pytest.fail(
            "missing for the Ansible tests: " + ", ".join(missing) + "; run tests/setup/ansible.sh",
            pytrace=False,
        )


def ansible_config(workdir: Path, config: str = "checkout") -> Path:
    """An ansible.cfg for the runs: "checkout" is this checkout's ansible.cfg (what an admin
    running from it reads), "deepops" DeepOps' settings; both with the tests' collection path
    (the chroot connection), a local_tmp inside workdir and a slower internal poll."""
    if config == "deepops":
        settings = {k: v.format(workdir=workdir) for k, v in DEEPOPS_CFG.items()}
        text = "[defaults]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
    else:
        text = (REPO / "ansible.cfg").read_text()
    text += (
        f"collections_path = {COLLECTIONS}\n"
        "pipelining = True\n"
        # The controller's wait for its forks' results polls every 1 ms by default: with 8 runs
        # side by side on 2 cores, 50 ms took test_ansible_converge.py from 416 to 355 CPU s
        # (and 211 to 180 s), 0.2 s no further (2026-11-30). A controller setting: what the
        # nodes are given is the same.
        "internal_poll_interval = 0.05\n"
        f"roles_path = {ANSIBLE_DIR / 'roles'}\n"
        f"local_tmp = {workdir / 'ansible-local'}\n"
    )
    cfg = workdir / f"ansible-{config}.cfg"
    partial = cfg.with_name(f"{cfg.name}.{threading.get_ident()}")
    partial.write_text(text + "\n")
    partial.replace(cfg)  # runs side by side read it: never half written
    return cfg


def controller_remote_tmp() -> None:
    """The controller's ~/.ansible/tmp (mode 0700), as on a controller that has run Ansible
    before. The role's controller-side modules (get_url, delegated to localhost) need it; on a
    fresh machine the first of them makes it and prints Ansible's "Module remote_tmp ... did
    not exist" warning, which the converge tests refuse: which run was first depended on the
    order of the run's tests (a fresh CI machine's run, 2026-12-01). An admin sees that
    warning once, on a controller's first run."""
    for private in (Path.home() / ".ansible", Path.home() / ".ansible/tmp"):
        private.mkdir(mode=0o700, exist_ok=True)


def ansible_env(workdir: Path, core: str = "newest", config: str = "checkout") -> dict[str, str]:
    """Environment for ansible-playbook: ansible-core ``core`` ("2.17" or "newest"), the
    ``config`` ansible.cfg, our collection path, no colours, the controller's cache (built
    wheel, fetched packages) inside workdir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(HOST_ONLY_ENV)}
    controller_remote_tmp()
    env.update(
        ANSIBLE_CONFIG=str(ansible_config(workdir, config)),
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        PYTHONUNBUFFERED="1",
        XDG_CACHE_HOME=str(workdir / "controller-cache"),
    )
    bindir = CORES[core]
    if bindir is not None:
        env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env


def run_playbook(
    workdir: Path,
    inventory: Path,
    *extra: str,
    playbook: Path = SITE,
    timeout: float = 600,
    core: str = "newest",
    config: str = "checkout",
) -> PlaybookRun:
    """Run ansible-playbook for real (ansible-core ``core``, ansible.cfg ``config``) and capture
    its output."""
    args = ["ansible-playbook", "-i", str(inventory), str(playbook), *extra]
    start = time.monotonic()
    proc = subprocess.run(
        args,
        cwd=workdir,
        env=ansible_env(workdir, core, config),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(args, proc.returncode, proc.stdout, time.monotonic() - start)


def warnings(run: PlaybookRun) -> list[str]:
    """The warnings ansible-playbook printed ([WARNING], [DEPRECATION WARNING])."""
    warning = re.compile(r"\[(DEPRECATION )?WARNING\]")
    return [line for line in run.output.splitlines() if warning.match(line)]


def write_inventory(
    path: Path, targets: Iterable[Target], names: Mapping[str, Target] | None = None
) -> Path:
    """A YAML-plugin (JSON) inventory with DeepOps' groups holding these targets (or, with
    names, these host names for targets; several names may share one root filesystem)."""
    hosts = dict(names) if names is not None else {t.name: t for t in targets}
    groups: dict[str, dict[str, dict[str, object]]] = {"slurm-node": {}, "slurm-master": {}}
    for name, t in hosts.items():
        groups[t.group][name] = {
            "ansible_host": str(t.root),
            "ansible_connection": "community.general.chroot",
            "ansible_become": False,
            "ansible_python_interpreter": "/usr/bin/python3",
            **t.hostvars,
        }
    children = {g: {"hosts": h} for g, h in groups.items() if h}
    path.write_text(
        json.dumps({"all": {"children": {"slurm-cluster": {"children": children}}}}, indent=1)
    )
    return path
