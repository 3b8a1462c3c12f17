"""Build targets: every site profile with a container, plus the offline ``local`` target."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ..errors import UsageError
from ..sites import Site, all_sites

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

    @property
    def arch(self) -> str:
        return str(self.build["arch"])

    @property
    def gpu_flag(self) -> str:
        """``--nv``, ``--rocm`` or nothing: what ``apptainer exec`` needs for this GPU."""
        return str(self.build.get("apptainer_gpu_flag") or "")

    @property
    def stack(self) -> str:
        """``spack`` (the site's Spack environment) or ``wheels`` (built on the host)."""
        return str(self.build.get("stack", "spack"))


def _from_site(site: Site) -> Target:
    return Target(site.name, site.description, site.gpu_vendor, site.launcher, site.build)


@cache
def _local() -> Target:
    text = resources.files(__package__).joinpath("local.yaml").read_text()
    data = yaml.safe_load(text)
    return Target(data["name"], data["description"], None, "none", data["build"])


@cache
def all_targets() -> dict[str, Target]:
    """Every build target by name: sites whose build data asks for a container, and local."""
    targets = {
        name: _from_site(site)
        for name, site in all_sites().items()
        if site.build.get("container", True)
    }
    targets["local"] = _local()
    return dict(sorted(targets.items()))


def load_target(name: str) -> Target:
    """The target called ``name``, or a UsageError listing the known ones."""
    try:
        return all_targets()[name]
    except KeyError:
        raise UsageError(
            f"unknown site {name!r}", f"use one of: {', '.join(all_targets())}"
        ) from None
