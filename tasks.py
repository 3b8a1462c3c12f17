"""Developer tasks (invoke): images, batch scripts, lint, tests.

Logic lives in dask_hpc_deploy (deploy/, installed with `python3 -m pip install -e ./deploy`).
"""

from __future__ import annotations

import functools
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke import Context, Exit, task

from dask_hpc.errors import UsageError

REPO = Path(__file__).resolve().parent


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a UsageError into one line on stderr and a non-zero exit, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UsageError as e:
            raise Exit(f"error: {e}", code=e.exit_code) from None

    return wrapper


def _count(option: str, value: str | int) -> int:
    """An integer option given on the command line, or a one-line error."""
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--{option} takes a whole number, not {value!r}") from None


@task(
    help={
        "site": "build target: a site name (invoke sites) or local",
        "output": "image file to write (default: dask-hpc-SITE.sif)",
        "dry_run": "validate and print the exact commands, run nothing",
        "force": "overwrite an existing image",
    }
)
@one_line_errors
def build(
    c: Context, site: str, output: str = "", dry_run: bool = False, force: bool = False
) -> None:
    """Validate a site's Apptainer definition, then build its image with apptainer."""
    from dask_hpc_deploy import build as builder
    from dask_hpc_deploy.targets import load_target

    plan = builder.plan(
        load_target(site),
        REPO,
        Path(output) if output else None,
        force=force,
        check_tools=not dry_run,
    )
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if dry_run:
        for step in plan.steps:
            print(step)
        return
    builder.execute(plan, REPO)
    print(f"built {plan.output}")


@task
@one_line_errors
def sites(c: Context) -> None:
    """Table of sites: batch system, launcher, GPUs, base image, Spack target, retired."""
    from dask_hpc.sites import all_sites
    from dask_hpc_deploy.targets import all_targets

    header = ("site", "batch", "launcher", "GPUs/node", "base image", "spack target", "status")
    rows = [header]
    for name, target in all_targets().items():
        site = all_sites().get(name)
        gpus = "-"
        if site and site.gpu_vendor:
            count = site.gpu_count if site.gpu_count is not None else "detected"
            gpus = f"{count} {site.gpu_vendor}"
        rows.append(
            (
                name,
                site.batch_system if site else "-",
                site.launcher if site else "-",
                gpus,
                str(target.build.get("base_image")),
                str(target.build.get("spack_target", "-")),
                f"retired {site.retired}" if site and site.retired else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@task(
    help={
        "site": "site whose batch system and launcher to use",
        "nodes": "number of nodes",
        "workers_per_node": "workers (ranks) per node (default: GPUs per node, else 1)",
        "worker_type": "cpu or gpu (default: gpu where the site has GPUs)",
        "walltime": "HH:MM:SS (default 01:00:00)",
        "account": "project to charge",
        "queue": "queue or partition",
        "image": "path of the image on the site (default: dask-hpc-SITE.sif)",
        "job_name": "job name (default dask-hpc)",
        "log": "job log file (default: the batch system's usual name)",
        "output": "write the script here instead of stdout",
    }
)
@one_line_errors
def job(
    c: Context,
    site: str,
    nodes: str,
    workers_per_node: int = 0,
    worker_type: str = "",
    walltime: str = "01:00:00",
    account: str = "",
    queue: str = "",
    image: str = "",
    job_name: str = "dask-hpc",
    log: str = "",
    output: str = "",
) -> None:
    """Print a ready batch script running COMMAND (after --) on a dask-hpc cluster."""
    from dask_hpc.batch.script import JobRequest, render

    req = JobRequest(
        site=site,
        nodes=_count("nodes", nodes),
        command=shlex.split(c.remainder),
        workers_per_node=workers_per_node or None,
        worker_type=worker_type or None,
        walltime=walltime,
        account=account or None,
        queue=queue or None,
        image=image or None,
        job_name=job_name,
        output=log or None,
    )
    text = render(req)
    if output:
        Path(output).write_text(text)
        Path(output).chmod(0o755)
    else:
        sys.stdout.write(text)


@task(help={"check": "only check that the committed definitions are up to date"})
@one_line_errors
def definitions(c: Context, check: bool = False) -> None:
    """Render containers/SITE.def for every target from the template and containers/SITE.yaml."""
    from dask_hpc_deploy.definitions import definition_path, render
    from dask_hpc_deploy.targets import all_targets

    stale = []
    for target in all_targets().values():
        path = definition_path(REPO / "containers", target)
        text = render(target)
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path.name)
        if not check:
            path.write_text(text)
    if check and stale:
        raise UsageError(f"out of date: {', '.join(stale)}", "run: invoke definitions")
    print(f"{'stale' if stale else 'up to date'}: {', '.join(stale) or 'all'}")


@task
@one_line_errors
def lint(c: Context) -> None:
    """Lint definitions (up to date), Spack environments (policy), Ansible, Python."""
    from dask_hpc_deploy.lint import lint_all

    lint_all(c, REPO)


@task(help={"args": "extra pytest arguments, e.g. '-k build -x'"})
def test(c: Context, args: str = "") -> None:
    """Run the test suite (python3 -m pytest -ra)."""
    c.run(f"python3 -m pytest -ra {args}", pty=False)
