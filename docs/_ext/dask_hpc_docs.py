"""Sphinx directives that write reference tables from the code, so they cannot drift from it.

They write Markdown (MyST), which the page they sit in parses: every page here is Markdown.

- ``start-cluster-options``: every option of ``start-cluster``, from its argparse parser
  (``dask_hpc.cli.build_parser``), group by group, with the help text it prints.
- ``start-cluster-usage``: the usage line and the examples of ``start-cluster --help``.
- ``hpc-config``: the ``hpc.*`` dask config keys, their defaults and comments (``hpc.yaml``).
- ``launcher-table``: the launchers start-cluster recognizes (``dask_hpc.planning.launchers``).
- ``site-table``: the site profiles (``src/dask_hpc/sites/*.yaml``).
- ``module-map``: the modules of ``src/dask_hpc`` (or of the subpackage it names, e.g.
  ``elastic``) with the first paragraph of their docstrings.
- ``command-output``: a command (``hpc-job ...``, ``hpc-cluster script ...``), run when the
  page is built, and what it printed: a page shows the script the code writes, never an old one.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "dask_hpc"
# The commands command-output runs, as this Python runs them (the docs build's environment).
# The package's own commands: the docs build needs the package and its `docs` extra, nothing
# of the checkout's development tools (invoke).
RUNNERS = {
    "hpc-job": [sys.executable, "-m", "dask_hpc.batch"],
    "hpc-cluster": [sys.executable, "-m", "dask_hpc.elastic"],
}


def _escape(text: str) -> str:
    """Plain text for a Markdown table cell: markup characters escaped."""
    return re.sub(r"([\\`*_|<\[\]])", r"\\\1", " ".join(text.split()))


def _literal(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


class _Generated(Directive):
    """A directive whose body is reStructuredText made by :meth:`lines`."""

    has_content = False

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(self.lines(), source=type(self).__name__), 0, container)
        return container.children


def option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, list[list[str]]]]:
    """(group title, rows of option / argument / help) for every group with options."""
    groups = []
    for group in parser._action_groups:  # argparse keeps no public list of its groups
        rows = []
        for action in group._group_actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            names = ", ".join(_literal(s) for s in action.option_strings) or _literal(
                str(action.metavar or action.dest)
            )
            if action.nargs == 0:
                argument = ""
            elif not action.option_strings:
                argument = ""  # a positional: its name is its argument
            elif action.choices:
                argument = _literal("{" + ",".join(map(str, action.choices)) + "}")
            else:
                argument = _literal(str(action.metavar or action.dest.upper()))
            help_text = (action.help or "").replace("%%", "%")
            if isinstance(action, argparse._VersionAction):
                help_text = "print the version (from the git tag) and exit"
            rows.append([names, argument, _escape(help_text)])
        if rows:
            title = {"positional arguments": "arguments", "options": "general"}.get(
                group.title or "", group.title or ""
            )
            groups.append((title, rows))
    return groups


class StartClusterOptions(_Generated):
    def lines(self) -> list[str]:
        from dask_hpc.cli import build_parser

        out: list[str] = []
        for title, rows in option_rows(build_parser()):
            out += [f"```{{rubric}} {title}", "```", ""]
            out += _table(["option", "argument", "what"], rows)
        return out


class StartClusterUsage(_Generated):
    def lines(self) -> list[str]:
        from dask_hpc.cli import build_parser

        parser = build_parser()
        text = f"usage: {parser.usage}\n\n{parser.description}\n\n{parser.epilog}"
        return ["```text", *text.rstrip().splitlines(), "```", ""]


def config_rows(path: Path) -> list[list[str]]:
    """key / default / comment rows of ``hpc.yaml`` (a comment may go on over later lines; a
    key with no value is a section, ``hpc.cluster``, whose keys are indented under it)."""
    rows: list[list[str]] = []
    section = ""
    for line in path.read_text().splitlines():
        entry = re.match(r"^(  |    )([a-z-]+):\s*(.*?)\s*(?:#\s*(.*))?$", line)
        more = re.match(r"^\s+#\s*(.*)$", line)
        if entry:
            indent, key, default, comment = entry.groups()
            if len(indent) == 2:
                section = "" if default else f"{key}."
            key = key if len(indent) == 2 else section + key
            rows.append([f"hpc.{key}", default.strip('"') or "", comment or ""])
        elif more and rows:
            rows[-1][2] += " " + more.group(1)
    return rows


class HpcConfig(_Generated):
    def lines(self) -> list[str]:
        rows = [
            [_literal(key), _literal(default), _escape(comment)]
            for key, default, comment in config_rows(SRC / "hpc.yaml")
        ]
        return _table(["key", "default", "what"], rows)


def package_imports(tree: ast.Module, package: Path, module: str) -> list[str]:
    """The package's own modules that ``module`` of ``package`` imports (at the top or inside a
    function): a module of the same (sub)package by its name, any other from ``dask_hpc``
    (``guard.private``, ``errors``)."""
    here = ["dask_hpc", *package.relative_to(SRC).parts]
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = here[: len(here) - node.level + 1] + (node.module.split(".") if node.module else [])
        for alias in node.names:
            full = base + [alias.name] if _is_module(base + [alias.name]) else base
            if len(full) > 1 and full[:-1] == here:
                found.add(full[-1])
            elif len(full) > 1:
                found.add(".".join(full[1:]))
    return sorted(found - {module})


def _is_module(parts: list[str]) -> bool:
    """``["dask_hpc", "guard", "private"]``: a module or subpackage of ours."""
    path = SRC.joinpath(*parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


class LauncherTable(_Generated):
    def lines(self) -> list[str]:
        from dask_hpc.planning.launchers import LAUNCHERS, NONE

        rows = [
            [
                _literal(launcher.name),
                _escape(launcher.description),
                ", ".join(_literal(v) for v in launcher.rank) or "(one process)",
            ]
            for launcher in (*LAUNCHERS, NONE)
        ]
        return _table(["`--launcher`", "what", "its rank, read from"], rows)


def site_rows(sites: Path) -> list[list[str]]:
    import yaml

    rows = []
    for path in sorted(sites.glob("*.yaml")):
        site = yaml.safe_load(path.read_text())
        gpu = site.get("gpu") or {}
        tiles = f" x {gpu['tiles']} tiles" if (gpu.get("tiles") or 1) > 1 else ""
        if gpu.get("count"):
            gpus = f"{gpu['count']} {gpu['vendor']}{tiles}"
        else:
            gpus = "detected" if gpu.get("vendor") else ""
        retired = f" (retired {site['retired']})" if site.get("retired") else ""
        value = {key: site.get(key) for key in ("network_interface", "local_directory")}
        value["scheduler_directory"] = site.get("scheduler_directory")
        rows.append(
            [
                _literal(site["name"]),
                _escape(f"{site.get('batch_system')} / {site.get('launcher')}"),
                _escape(gpus),
                *(_literal(str(v)) if v else "" for v in value.values()),
                _escape(site.get("description", "") + retired),
            ]
        )
    return rows


class SiteTable(_Generated):
    def lines(self) -> list[str]:
        header = ["`--site`", "batch / launcher", "GPUs per node", "interface"]
        header += ["worker directory", "scheduler directory", "what"]
        return _table(header, site_rows(SRC / "sites"))


def module_rows(package: Path) -> list[list[str]]:
    """module / what it owns (its docstring's first paragraph) / the package modules it uses."""
    paths = [
        p
        for p in sorted(package.glob("*.py"))
        if not p.name.startswith("_") or p.name == "__init__.py"  # not _version.py (built)
    ]
    paths += sorted(p / "__init__.py" for p in package.iterdir() if (p / "__init__.py").is_file())
    rows = []
    for path in paths:
        tree = ast.parse(path.read_text())
        first = (ast.get_docstring(tree) or "").split("\n\n")[0]
        name = path.name if path.parent == package else f"{path.parent.name}/"
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        uses = ", ".join(package_imports(tree, package, stem))
        rows.append([_literal(name), _escape(first), _escape(uses)])
    return rows


class ModuleMap(_Generated):
    optional_arguments = 1  # a subpackage: its modules instead of the package's

    def lines(self) -> list[str]:
        package = SRC / self.arguments[0] if self.arguments else SRC
        return _table(["module", "what it owns", "uses"], module_rows(package))


def run_documented(command: str, env: dict[str, str]) -> str:
    """What ``command`` prints, run here; the names that differ from run to run (the cluster's
    id, its directory, this Python) replaced by the page's placeholders."""
    argv = shlex.split(command)
    with tempfile.TemporaryDirectory() as home:
        full = {**os.environ, "DASK_HPC__SCHEDULER_DIRECTORY": f"{home}/.dask-hpc", **env}
        done = subprocess.run(
            [*RUNNERS[argv[0]], *argv[1:]], capture_output=True, text=True, env=full, cwd=ROOT,
            timeout=120,
        )
    if done.returncode != 0:
        raise RuntimeError(f"{command!r} failed: {done.stderr.strip()}")
    text = done.stdout.replace(f"{home}/.dask-hpc", "/home/me/.dask-hpc")
    text = text.replace(sys.executable, "/usr/bin/python3")
    return re.sub(r"\bdh[0-9a-f]{6}\b", "dh3f9a2c", text)


class CommandOutput(Directive):
    """``command-output COMMAND``: the command (``:file:`` it writes to) and its output.
    ``:env: NAME=VALUE ...`` sets dask config for the run, and says so under the command."""

    required_arguments = 1
    final_argument_whitespace = True
    option_spec = {"file": directives.unchanged, "env": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        command = self.arguments[0]
        pairs = dict(p.split("=", 1) for p in shlex.split(self.options.get("env", "")))
        try:
            output = run_documented(command, pairs)
        except RuntimeError as error:
            raise self.error(str(error)) from None
        target = self.options.get("file")
        shown = f"{command} > {target}" if target else command
        lines = ["```bash", shown, "```", ""]
        if pairs:
            settings = ", ".join(f"`{k}={v}`" for k, v in pairs.items())
            lines += [f"run with {settings} in its environment, it writes:", ""]
        lines += ["```bash", *output.rstrip("\n").splitlines(), "```", ""]
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="command-output"), 0, container)
        return container.children


def setup(app):  # type: ignore[no-untyped-def]
    app.add_directive("start-cluster-options", StartClusterOptions)
    app.add_directive("start-cluster-usage", StartClusterUsage)
    app.add_directive("hpc-config", HpcConfig)
    app.add_directive("module-map", ModuleMap)
    app.add_directive("launcher-table", LauncherTable)
    app.add_directive("site-table", SiteTable)
    app.add_directive("command-output", CommandOutput)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
