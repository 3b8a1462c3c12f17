"""Render each target's Apptainer definition from one template and the target's build data."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from .targets import PACKAGE_MANAGERS, REPO, Target
from .templating import template
from .versions import pinned_version

INDENT = "    "


def spack_pins(repo: Path = REPO) -> dict[str, str]:
    """``spack/pins.yaml``: the Spack release and the spack-packages commit, used everywhere."""
    data = yaml.safe_load((repo / "spack" / "pins.yaml").read_text())
    return {"spack_version": str(data["spack"]), "spack_packages": str(data["spack_packages"])}


# Per stack: the files the build stage copies in, the %post script, and default build args.
STACKS: Mapping[str, Mapping[str, object]] = {
    "spack": {
        "files": [
            "spack /opt/dask-hpc/spack",
            "pyproject.toml /opt/dask-hpc/src/pyproject.toml",
            "src /opt/dask-hpc/src/src",
        ],
        "script": "stack-spack.sh",
        "arguments": spack_pins(),
    },
    "wheels": {
        "files": ["{{ wheels }} /opt/dask-hpc/wheels"],
        "script": "stack-wheels.sh",
        "arguments": {},
    },
}


def _lines(lines: list[str], indent: str = INDENT) -> str:
    return "\n".join(indent + line if line else "" for line in lines)


def _install(manager: str, packages: list[str]) -> str:
    if not packages:
        return INDENT + ": no system packages to add"
    return _lines(PACKAGE_MANAGERS[manager].format(packages=" ".join(packages)).splitlines())


def _tests(build: Mapping[str, object]) -> str:
    lines = [
        f"python -c \"import importlib.util as u, sys; sys.exit(u.find_spec('{m}') is None)\""
        for m in build.get("gpu_modules") or []
    ]
    lines += [str(line) for line in build.get("tests") or []]
    return _lines(lines)


def launch_example(target: Target) -> str:
    """The site's launcher running one container per rank (for %help and the docs)."""
    from dask_hpc.batch import container
    from dask_hpc.batch.script import launch_command, per_rank, site_placement
    from dask_hpc.planning.sites import all_sites

    gpus = int(target.build.get("example_workers_per_node") or 2)
    kind = "gpu" if target.gpu_vendor else "cpu"
    site = all_sites().get(target.name)
    fields: dict[str, int | str] = {
        "nodes": 2, "per_node": gpus, "ranks": 2 * gpus, "gpus_per_rank": int(kind == "gpu"),
        **per_rank(gpus, site.cpu_cores if site else None, None),
    }
    launcher, options = target.launcher, ""
    if site:  # the site's own CPU and GPU maps, and its directories bound (as in its jobs)
        launcher, options = site_placement(
            site, launcher, site.batch_system, fields, kind == "gpu"
        )
    line = launch_command(
        launcher=launcher,
        batch_system=site.batch_system if site else None,
        nodes=2,
        workers_per_node=gpus,
        worker_type=kind,
        argv=["start-cluster", kind, str(gpus), "--", "python", "job.py"],
        image="IMAGE",
        gpu_flag=target.gpu_flag,
        binds=[path for path, _ in container.site_binds(site)] if site else (),
        fields=fields,
        options=options,
    )
    return re.sub(r"'([^' ]*\$[^' ]*)'", r'"\1"', line)  # a bind's $VAR, expanded in the job


def render(target: Target) -> str:
    """The complete definition text for ``target``."""
    build = target.build
    stack = STACKS[target.stack]
    arguments = {
        "base_image": build["base_image"],
        "runtime_image": build.get("runtime_image", build["base_image"]),
        **stack["arguments"],  # type: ignore[dict-item]
    }
    header = {"bootstrap": build.get("bootstrap", "docker")}
    manager = str(build.get("package_manager", "apt"))
    stack_script = template(str(stack["script"])).substitute(
        name=target.name,
        pip_packages=" ".join(str(p) for p in build.get("pip_packages") or []),
    )
    gpu_flag = target.gpu_flag + " " if target.gpu_flag else ""
    return template("apptainer.def").substitute(
        name=target.name,
        description=target.description,
        build_bootstrap=header["bootstrap"],
        build_header="From: {{ base_image }}",
        runtime_bootstrap=header["bootstrap"],
        runtime_header="From: {{ runtime_image }}",
        arguments=_lines([f"{k}={v}" for k, v in arguments.items()]),
        build_files=_lines(list(stack["files"])),  # type: ignore[call-overload]
        build_packages=_install(manager, list(build.get("build_packages") or [])),
        stack=stack_script.rstrip("\n"),
        runtime_packages=_install(manager, list(build.get("runtime_packages") or [])),
        tests=_tests(build),
        dask_version=pinned_version("dask"),
        gpu_runtime=build.get("gpu_runtime", "none"),
        arch=target.arch,
        runtime_image=arguments["runtime_image"],
        launch_example=launch_example(target),
        gpu_flag_example=gpu_flag,
    )


def definition_path(containers_dir: Path, target: Target) -> Path:
    """Where the committed definition of ``target`` lives."""
    return containers_dir / f"{target.name}.def"
