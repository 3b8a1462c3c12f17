"""The commands of the documentation pages, and how each is run or dry-run (importable as
``doc_commands``; tests/test_docs_commands.py runs them).

A page's ``bash``/``sh`` blocks hold commands, one per line (``\\`` continues a line, ``#``
starts a comment, ``&&`` chains); ``{command-output}`` directives are commands the docs build
runs. Each command goes to the checker of its program. Commands that can run here run, in a
scratch directory per page holding links to the repository's files (``hpc-job``,
``hpc-cluster script``, ``openssl``, ``python3 -m venv``, ``pip wheel``); the others are
dry-run: ``start-cluster`` under a launcher is planned (``plan.make_plan``, what
``--dry-run`` prints) in the environment that launcher gives a rank, its CPU binding and GPUs
included (EMULATED: srun, PALS, Open MPI, jsrun, flux run as their options ask); options are
checked against the program's own parser (``invoke push``, ``hpc-cluster up``, the benchmarks);
``qsub``/``sbatch``/``bsub``/``flux batch`` must submit a script the page wrote, of their batch
system;
``ansible-playbook`` gets ``--syntax-check``; setup scripts ``bash -n``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBMIT = {
    "qsub": ("#PBS ", "#COBALT "), "sbatch": ("#SBATCH ",), "bsub": ("#BSUB ",),
    "flux": ("#FLUX: ",),
}


@dataclass
class Command:
    """One command of a page, where it is, and the block it sits in."""

    page: Path
    line: int
    text: str
    block: list[str] = field(default_factory=list)
    built: bool = False  # a {command-output}: the docs build runs it
    file: str | None = None  # what a {command-output} writes (its :file:)
    env: dict[str, str] = field(default_factory=dict)  # a {command-output}'s :env:


@dataclass
class PageRun:
    """What a page's commands left behind: its scratch directory, the files they wrote (name ->
    text), and the allocation the last ``salloc`` asked for."""

    work: Path
    files: dict[str, str] = field(default_factory=dict)
    allocation: list[str] = field(default_factory=list)


def _logical_lines(body: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for i, raw in enumerate(body.splitlines()):
        if not pending:
            start = i
        pending += raw.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            out.append((start, pending.strip()))
        pending = ""
    return out


def page_commands(page: Path) -> list[Command]:
    """Every command of ``page``: its shell blocks' lines and its command-output directives."""
    text = page.read_text()
    found: list[Command] = []
    blocks = r"^```(\{command-output\}|bash|sh)([^\n]*)\n(.*?)^```"
    for match in re.finditer(blocks, text, re.S | re.M):
        first = text[: match.start()].count("\n") + 2
        if match.group(1) == "{command-output}":
            options = dict(re.findall(r"^:(\w+): *(.*)$", match.group(3), re.M))
            env = dict(p.split("=", 1) for p in shlex.split(options.get("env", "")))
            found.append(Command(page, first - 1, match.group(2).strip(), built=True,
                                 file=options.get("file"), env=env))
            continue
        lines = _logical_lines(match.group(3))
        block = [line for _, line in lines]
        found += [Command(page, first + i, line, block) for i, line in lines]
    return found


def split_chain(text: str) -> list[list[str]]:
    """A line's commands (``&&`` chains, a trailing ``&`` dropped), comments removed."""
    words = shlex.split(text, comments=True)
    chains: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            chains.append([])
        elif word != "&":
            chains[-1].append(word)
    return [c for c in chains if c]


def env_prefix(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
        key, value = argv[0].split("=", 1)
        env[key] = value
        argv = argv[1:]
    return env, argv


def redirects(argv: list[str]) -> tuple[list[str], str | None, str | None]:
    """(argv, stdout file, stdin file)."""
    out = stdin = None
    rest: list[str] = []
    items = iter(argv)
    for word in items:
        if word == ">":
            out = next(items)
        elif word == "<":
            stdin = next(items)
        else:
            rest.append(word)
    return rest, out, stdin


def run(argv: list[str], run_: PageRun, env: dict[str, str] | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    import os

    full = {**os.environ, **(env or {})}
    return subprocess.run(argv, cwd=run_.work, env=full, capture_output=True, text=True,
                          timeout=timeout)


def prepare(work: Path) -> PageRun:
    """A scratch directory holding links to the repository's files (not .git)."""
    work.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        if entry.name not in (".git", "build") and not entry.name.startswith(".venv"):
            (work / entry.name).symlink_to(entry)
    return PageRun(work)


Checker = Callable[[list[str], Command, PageRun], str]
