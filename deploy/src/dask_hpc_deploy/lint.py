"""``invoke lint``: definitions, Spack environments, Ansible and Python, each by its own checker.

Definitions must be what ``invoke definitions`` renders (Apptainer itself checks their grammar
when it builds them: CI builds the local image for real); Spack environments are checked
against our policy by :mod:`.spackcheck`, Ansible by ansible-lint, Python by ruff.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Protocol

from dask_hpc.errors import UsageError

from . import definitions
from .targets import all_targets


class Runner(Protocol):
    """What lint needs of an invoke Context."""

    def run(self, command: str, **kwargs: Any) -> Any: ...


def lint_definitions(repo: Path) -> list[str]:
    """Every committed definition is rendered from the current template and build data."""
    problems = []
    containers = repo / "containers"
    targets = {definitions.definition_path(containers, t): t for t in all_targets().values()}
    for path in sorted((repo / "containers").glob("*.def")):
        rel = path.relative_to(repo)
        target = targets.get(path)
        if target is None:
            problems.append(f"{rel}: no build data containers/{path.stem}.yaml")
        elif path.read_text() != definitions.render(target):
            problems.append(f"{rel}: out of date (run: invoke definitions)")
    for path in targets:
        if not path.exists():
            problems.append(f"{path.relative_to(repo)}: missing (run: invoke definitions)")
    return problems


def lint_all(c: Runner, repo: Path) -> None:
    """Run every linter; UsageError listing what failed."""
    failed = []
    problems = lint_definitions(repo)
    for p in problems:
        print(p)
    print(f"definitions: {'FAILED' if problems else 'ok'}")
    failed += ["definitions"] if problems else []
    commands = {
        "spack": f"{shlex.quote(sys.executable)} -m dask_hpc_deploy.spackcheck",
        "ansible": "ansible-lint -q ansible",
        "python": "ruff check .",
    }
    for name, command in commands.items():
        tool = shlex.split(command)[0]
        if shutil.which(tool) is None:
            print(f"{name}: {tool} is not on PATH")
            failed.append(name)
            continue
        ok = c.run(
            command, warn=True, pty=False, env={"ANSIBLE_HOME": str(repo / "build" / "ansible")}
        ).ok
        print(f"{name}: {'ok' if ok else 'FAILED'}")
        failed += [] if ok else [name]
    if failed:
        raise UsageError(f"lint failed: {', '.join(failed)}")
