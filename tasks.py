"""Developer tasks (invoke): images, batch scripts, lint, tests.

Logic lives in dask_hpc_deploy (deploy/, installed with `python3 -m pip install -e ./deploy`).
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke import Context, Exit, task

from dask_hpc.errors import UsageError
from dask_hpc.guard.images import ImageError

REPO = Path(__file__).resolve().parent
# dask_hpc_deploy works on this checkout, wherever it is installed (editable or not)
os.environ["DASK_HPC_REPO"] = str(REPO)


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a UsageError (or an image refused, ImageError) into one line on stderr and a non-zero
    exit, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (UsageError, ImageError) as e:
            raise Exit(f"error: {e}", code=e.exit_code) from None

    return wrapper


@task(
    help={
        "site": "build target: a site name (invoke sites) or local",
        "output": "image file to write (default: dask-hpc-SITE.sif)",
        "dry_run": "validate and print the exact commands, run nothing",
        "force": "overwrite an existing image",
        "sign_key": "the site's private key (PEM) to sign the image with "
        "(default: $DASK_HPC_SIGNING_KEY; none: unsigned)",
    }
)
@one_line_errors
def build(
    c: Context,
    site: str,
    output: str = "",
    dry_run: bool = False,
    force: bool = False,
    sign_key: str = "",
) -> None:
    """Validate a site's Apptainer definition, build its image with apptainer, sign it when a
    key is configured, and record its sha256 in IMAGE.sha256."""
    from dask_hpc_deploy import build as builder
    from dask_hpc_deploy.registry import signing_key
    from dask_hpc_deploy.targets import load_target

    plan = builder.plan(
        load_target(site),
        REPO,
        Path(output) if output else None,
        force=force,
        check_tools=not dry_run,
        sign_key=signing_key(sign_key),
    )
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if dry_run:
        for step in plan.steps:
            print(step)
        return
    builder.execute(plan, REPO)
    signed = f", signed with {plan.sign_key}" if plan.sign_key else ", unsigned"
    digest = plan.digest_file.read_text().split()[0]
    print(f"built {plan.output} (sha256 {digest}{signed})")
    from dask_hpc.guard.images import recorded_digest
    from dask_hpc.images_enroot import for_site  # the site's Pyxis image too (issue 45)

    sqsh = for_site(site, plan.output, plan.sign_key)
    if sqsh:
        print(f"made {sqsh} from it, for Pyxis (sha256 {recorded_digest(sqsh)}{signed})")
    from dask_hpc import images_podman  # the site's podman-hpc image too (issue 45)

    oci = images_podman.for_site(site, plan.output, plan.sign_key)
    if oci:
        print(f"made {oci} from it, for podman-hpc (sha256 {recorded_digest(oci)}{signed})")


TRUST_HELP = {
    "key": "the site's public key (PEM) to verify with (default: dask config hpc.image-key)",
    "no_verify": "do not verify the image's signature (explicit opt-out)",
    "no_https": "talk to the registry over plain HTTP (a registry on loopback or a site's own)",
}


@task(help={"image": "the image to push (a SIF)", "uri": "oras://REGISTRY/NAME:TAG", **TRUST_HELP})
@one_line_errors
def push(
    c: Context, image: str, uri: str, key: str = "", no_verify: bool = False, no_https: bool = False
) -> None:
    """Push an image to an OCI registry (oras://), after checking its recorded sha256 and, with
    a site key, its signature."""
    from dask_hpc.guard import images
    from dask_hpc_deploy import registry

    trust = images.configured_trust(key or None, False if no_verify else None)
    digest = registry.push(Path(image), uri, trust, no_https=no_https)
    print(f"pushed {image} (sha256 {digest}) to {uri}")


@task(
    help={
        "uri": "oras://REGISTRY/NAME:TAG",
        "output": "image file to write (default: dask-hpc-NAME.sif, as invoke build and "
        "invoke job name it)",
        "sha256": "the sha256 the image must have (its IMAGE.sha256 from invoke build)",
        "force": "overwrite an existing image",
        **TRUST_HELP,
    }
)
@one_line_errors
def pull(
    c: Context,
    uri: str,
    output: str = "",
    sha256: str = "",
    key: str = "",
    no_verify: bool = False,
    no_https: bool = False,
    force: bool = False,
) -> None:
    """Pull an image from an OCI registry (oras://); keep it only if it verifies with the site
    key (and has --sha256), and record its sha256."""
    from dask_hpc.guard import images
    from dask_hpc_deploy import registry

    trust = images.configured_trust(key or None, False if no_verify else None)
    name = uri.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    name = name if name.startswith("dask-hpc-") else f"dask-hpc-{name}"
    target = Path(output or f"{name}.sif")
    digest = registry.pull(uri, target, trust, sha256, no_https=no_https, force=force)
    how = f"verified with {trust.key}" if trust.key else "NOT verified (no site key)"
    print(f"pulled {uri} into {target} (sha256 {digest}, {how})")


@task
@one_line_errors
def sites(c: Context) -> None:
    """Table of sites: batch system, launcher, GPUs, base image, Spack target, retired."""
    from dask_hpc.planning.sites import all_sites
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


def _job_help() -> dict[str, str]:
    from dask_hpc.batch.jobcli import OPTIONS

    return {name: text for name, (text, _) in OPTIONS.items()}


@task(help=_job_help(), auto_shortflags=False)
@one_line_errors
def job(
    c: Context,
    site: str = "",
    nodes: str = "",
    workers_per_node: int = 0,
    worker_type: str = "",
    walltime: str = "01:00:00",
    account: str = "",
    queue: str = "",
    image: str = "",
    job_name: str = "dask-hpc",
    log: str = "",
    output: str = "",
    image_key: str = "",
    no_verify: bool = False,
    image_group: str = "",
    runtime: str = "",
    gpus_per_node: int = 0,
    cpus_per_worker: int = 0,
    memory_per_worker: str = "",
    batch_system: str = "",
    launcher: str = "",
    python: str = "",
) -> None:
    """Print a ready batch script running COMMAND (after --) on a dask-hpc cluster: the
    installed package's `hpc-job` command, with the same options."""
    from dask_hpc.batch import jobcli

    given = dict(locals())
    argv: list[str] = []
    for name, (_, kind) in jobcli.OPTIONS.items():
        value = given[name]
        if kind is bool:
            argv += [f"--{name.replace('_', '-')}"] if value else []
        elif value not in ("", 0):
            argv += [f"--{name.replace('_', '-')}", str(value)]
    code = jobcli.run([*argv, "--", *shlex.split(c.remainder)])
    if code:
        raise Exit(code=code)


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
