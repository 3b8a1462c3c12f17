"""Build targets: ``containers/<name>.yaml`` (build data) with its site profile, if any.

The build data lives beside the container definitions, in the repository, not in the runtime
site profiles that every rank reads: a rank never needs base images or package lists.
``local`` (the offline CPU image) has build data and no site profile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from dask_hpc.errors import UsageError
from dask_hpc.planning.sites import all_sites


def _repository() -> Path:
    """The checkout this package works on: ``$DASK_HPC_REPO`` (tasks.py sets it to its own
    directory), else the one an editable install of ``deploy/`` sits in, else the working
    directory or one above it. A non-editable install lives in site-packages, beside no
    checkout: ``invoke`` from the checkout still finds it."""
    given = os.environ.get("DASK_HPC_REPO")
    here = Path(__file__).resolve().parents[3]
    for candidate in [*([Path(given)] if given else []), here, Path.cwd(), *Path.cwd().parents]:
        if (candidate / "containers").is_dir() and (candidate / "deploy").is_dir():
            return candidate.resolve()
    return Path(given) if given else here


#: The repository this package works on.
REPO = _repository()
CONTAINERS = REPO / "containers"

# How each distribution's package manager installs packages (rendered into %post).
PACKAGE_MANAGERS: Mapping[str, str] = {
    "apt": "export DEBIAN_FRONTEND=noninteractive\n"
    "apt-get update -q\n"
    "apt-get install -y -q --no-install-recommends {packages}\n"
    "rm -rf /var/lib/apt/lists/*",
    "dnf": "dnf install -y -q {packages}\ndnf clean all",
}


@dataclass(frozen=True)
class Target:
    """What an image build needs to know about one site (or ``local``)."""

    name: str
    description: str
    gpu_vendor: str | None
    launcher: str
    build: Mapping[str, Any]
    retired: bool = False

    @property
    def arch(self) -> str:
        return str(self.build["arch"])

    @property
    def gpu_flag(self) -> str:
        """``--nv``, ``--rocm`` or nothing: what ``apptainer exec`` needs for this GPU."""
        from dask_hpc.batch.script import apptainer_gpu_flag

        return apptainer_gpu_flag(self.gpu_vendor)

    @property
    def stack(self) -> str:
        """``spack`` (the site's Spack environment) or ``wheels`` (built on the host)."""
        return str(self.build.get("stack", "spack"))


def build_data(name: str, containers: Path = CONTAINERS) -> dict[str, Any]:
    """``containers/<name>.yaml``."""
    return yaml.safe_load((containers / f"{name}.yaml").read_text()) or {}


@cache
def all_targets() -> dict[str, Target]:
    """Every build target by name: each ``containers/*.yaml``, with its site profile if any."""
    sites = all_sites()
    targets = {}
    found = sorted(CONTAINERS.glob("*.yaml"))
    if not found:
        raise UsageError(
            f"no build targets in {CONTAINERS}",
            "run invoke from dask-hpc's checkout (or set DASK_HPC_REPO to it)",
        )
    for path in found:
        data = build_data(path.stem)
        site = sites.get(path.stem)
        if site is None:
            targets[path.stem] = Target(path.stem, str(data.pop("description")), None, "none", data)
        else:
            targets[path.stem] = Target(
                site.name, site.description, site.gpu_vendor, site.launcher, data, site.retired
            )
    return targets


def load_target(name: str) -> Target:
    """The target called ``name``, or a UsageError listing the known ones."""
    try:
        return all_targets()[name]
    except KeyError:
        pass
    if name in all_sites():
        # generic and elcapitan: their ranks run the job's own Python (docs/sites.md)
        raise UsageError(
            f"site {name} has no image: its jobs run dask-hpc from the job's own environment "
            "(pip install dask-hpc there)",
            f"or build one of: {', '.join(all_targets())}",
        )
    raise UsageError(f"unknown site {name!r}", f"use one of: {', '.join(all_targets())}")
