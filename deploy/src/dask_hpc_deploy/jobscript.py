"""Ready-to-submit batch scripts: the site's batch system, its launcher, one container per rank."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from dask_hpc import images
from dask_hpc.errors import UsageError
from dask_hpc.sites import load_site

from .targets import Target
from .templating import template

WORKER_TYPES = ("cpu", "gpu")


@cache
def _data() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("templates", "batch.yaml").read_text()
    return yaml.safe_load(text)


@dataclass(frozen=True)
class JobRequest:
    """What the user asks for (``invoke job``)."""

    site: str
    nodes: int
    command: Sequence[str]
    workers_per_node: int | None = None
    worker_type: str | None = None
    walltime: str = "01:00:00"
    account: str | None = None
    queue: str | None = None
    image: str | None = None
    job_name: str = "dask-hpc"
    output: str | None = None
    image_key: str | None = None  # the site's public key; default: hpc.image-key (issue 21)
    verify_image: bool = True  # False: the explicit opt-out of the image check (issue 21)


def parse_walltime(text: str) -> int:
    """Seconds in ``[[HH:]MM:]SS``-style ``HH:MM:SS``, ``HH:MM`` or plain minutes."""
    if re.fullmatch(r"\d+", text):
        return int(text) * 60
    m = re.fullmatch(r"(\d+):(\d{1,2})(?::(\d{1,2}))?", text)
    if not m:
        raise UsageError(f"bad walltime {text!r}", "write HH:MM:SS, HH:MM or minutes")
    h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if mi >= 60 or s >= 60:
        raise UsageError(f"bad walltime {text!r}", "minutes and seconds go up to 59")
    return h * 3600 + mi * 60 + s


def _format_walltime(fmt: str, seconds: int) -> str:
    minutes = -(-seconds // 60)
    return fmt.format(h=seconds // 3600, m=(seconds % 3600) // 60, s=seconds % 60, minutes=minutes)


def launch_command(
    target: Target,
    nodes: int,
    workers_per_node: int,
    image: str,
    worker_type: str,
    command: str,
) -> str:
    """``LAUNCHER apptainer exec [--nv|--rocm] IMAGE start-cluster TYPE K -- COMMAND``."""
    site = load_site(target.name) if target.launcher != "none" else None
    cores = (site.cpu_cores if site else None) or workers_per_node
    fields = {
        "nodes": nodes,
        "per_node": workers_per_node,
        "ranks": nodes * workers_per_node,
        "cores_per_rank": max(1, cores // workers_per_node),
        "gpus_per_rank": 1 if worker_type == "gpu" else 0,
    }
    launchers = _data()["launchers"]
    key = f"{target.launcher}-{site.batch_system}" if site else target.launcher
    launcher = launchers.get(key, launchers[target.launcher]).format(**fields)
    exec_ = ["apptainer", "exec", *target.gpu_flag.split(), image]
    cluster = ["start-cluster", worker_type, str(workers_per_node), "--"]
    parts = [launcher, shlex.join(exec_ + cluster), command]
    return " ".join(p for p in parts if p)


def render(req: JobRequest, target: Target) -> str:
    """The batch script for ``req`` on the target's site."""
    site = load_site(req.site)
    system: Mapping[str, Any] = _data()["batch_systems"].get(site.batch_system) or {}
    if not system:
        raise UsageError(f"site {site.name} has no batch system", "start-cluster runs directly")
    if req.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, not {req.nodes}")
    if not req.command:
        raise UsageError("no command to run", "give it after --, e.g. -- python job.py")
    worker_type = req.worker_type or ("gpu" if site.gpu_vendor else "cpu")
    if worker_type not in WORKER_TYPES:
        raise UsageError(f"unknown worker type {worker_type!r}", "use cpu or gpu")
    per_node = req.workers_per_node or (site.gpu_count if worker_type == "gpu" else None) or 1
    if per_node < 1:
        raise UsageError(f"--workers-per-node must be at least 1, not {per_node}")
    walltime = _format_walltime(system["walltime"], parse_walltime(req.walltime))
    image = req.image or f"dask-hpc-{site.name}.sif"

    def directive(fmt: str | None, **kw: object) -> list[str]:
        return [system["directive"].format(fmt.format(**kw))] if fmt else []

    lines = directive(system["name"], name=req.job_name)
    lines += directive(system["nodes"], nodes=req.nodes)
    lines += directive(system["per_node"], per_node=per_node)
    lines += directive(system["time"], walltime=walltime)
    if req.account:
        lines += [system["directive"].format(system["account"].format(req.account))]
    if req.queue:
        queue = target.build.get("job_queue_directive") or system["queue"]  # e.g. QOS
        lines += [system["directive"].format(queue.format(req.queue))]
    lines += [
        system["directive"].format(system["output"].format(req.output or system["default_output"]))
    ]
    lines += [system["directive"].format(d) for d in target.build.get("job_directives") or []]
    setup = [str(s) for s in target.build.get("job_setup") or []]
    # Issue 21: the image is verified with the site's key once, before the launcher starts any
    # rank (dask_hpc.images; to move along with this module into dask_hpc.batch).
    trust = images.configured_trust(req.image_key, None if req.verify_image else False)
    if trust.key is not None:
        setup += images.shell_check(image, trust.key)
    launch = launch_command(
        target, req.nodes, per_node, image, worker_type, shlex.join(req.command)
    )
    text = template(f"{site.batch_system}.sh").substitute(
        directives="\n".join(lines),
        site=site.name,
        nodes=req.nodes,
        per_node=per_node,
        worker_type=worker_type,
        setup="\n".join(setup),
        launch=launch,
    )
    return re.sub(r"\n{3,}", "\n\n", text)
