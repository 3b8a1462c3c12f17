"""A checker for Apptainer definition files that follows Apptainer's own grammar.

Mirrors ``pkg/build/types/parser/deffile.go``, ``internal/pkg/build/args/reader.go`` and the
stage/bootstrap checks of ``internal/pkg/build`` (Apptainer 1.4): stages split at every line
starting ``Bootstrap:``; in each stage any line whose first word starts with ``%`` opens a
section (even indented, even inside a heredoc); header keywords and section names come from
fixed lists; ``{{ VAR }}`` needs a ``--build-arg`` or a default in that stage's ``%arguments``
(and every given build arg must be used); ``%files from STAGE`` needs an earlier stage of that
name; each bootstrap agent needs its own header keys.

:func:`check_policy` adds our own rules for dask-hpc images on top of the grammar.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

HEADER_KEYS = frozenset(
    "bootstrap from includecmd mirrorurl updateurl osversion include library registry namespace "
    "stage product user regcode productpgp registerurl modules fingerprints confurl setopt".split()
)
NUMBERED_HEADER_KEYS = frozenset({"otherurl"})  # otherurl0, otherurl1, ...
SECTIONS = frozenset(
    "help setup files labels environment pre post runscript test startscript arguments".split()
)
APP_SECTIONS = frozenset(
    "appinstall applabels appfiles appenv apptest apphelp apprun appstart".split()
)
OCI_AGENTS = ("docker", "docker-archive", "docker-daemon", "oci", "oci-archive")
# Header keys each bootstrap agent refuses to build without.
AGENT_REQUIRES: Mapping[str, tuple[str, ...]] = {
    **{agent: ("from",) for agent in OCI_AGENTS},
    "library": ("from",),
    "oras": ("from",),
    "shub": ("from",),
    "localimage": ("from",),
    "busybox": ("mirrorurl",),
    "debootstrap": ("mirrorurl", "osversion"),
    "arch": (),
    "yum": ("mirrorurl",),
    "dnf": ("mirrorurl",),
    "zypper": (),
    "scratch": (),
}

_STAGE_START = re.compile(r"(?mi)^bootstrap:")
_BUILD_ARG = re.compile(r"{{\s*(\w+)\s*}}")
_COMMENT_BEFORE = re.compile(r"\s*[#][^!]\s*.*")


@dataclass(frozen=True)
class Problem:
    """One finding: 1-based line number in the file, and what is wrong."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class Section:
    """A ``%name [args]`` section and its body."""

    name: str
    args: str
    body: str
    line: int


@dataclass
class Stage:
    """One build stage: its header keys and sections, with line numbers."""

    line: int
    header: dict[str, str] = field(default_factory=dict)
    header_lines: dict[str, int] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.header.get("stage", "")

    def section(self, name: str) -> Section | None:
        """The first section called ``name`` (case-insensitive), if any."""
        return next((s for s in self.sections if s.name == name), None)


@dataclass
class Definition:
    """A parsed definition file: its stages and the problems found."""

    stages: list[Stage]
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems


def _split_stages(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each stage, as Apptainer's ``parser.All`` splits them."""
    starts = [m.start() for m in _STAGE_START.finditer(text)]
    bounds = [0, *starts, len(text)]
    chunks = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b > a:
            chunks.append((text.count("\n", 0, a) + 1, text[a:b]))
    return chunks


def _parse_header(lines: list[tuple[int, str]], stage: Stage, problems: list[Problem]) -> None:
    key_cont, val_cont = "", ""
    for lineno, raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            if key_cont:
                stage.header[key_cont] = val_cont
                key_cont, val_cont = "", ""
            continue
        trimmed = line.split("#")[0]
        if not val_cont:
            if ":" not in trimmed:
                problems.append(Problem(lineno, f"header key {trimmed.strip()!r} has no value"))
                continue
            key, val = trimmed.split(":", 1)
            key, val = key.strip().lower(), val.strip()
        else:
            key, val = key_cont, val_cont + trimmed.strip()
            key_cont, val_cont = "", ""
        if val.endswith("\\"):
            key_cont, val_cont = key, val[:-1]
            continue
        base = re.sub(r"\d+$", "", key)
        if key not in HEADER_KEYS and not (base != key and base in NUMBERED_HEADER_KEYS):
            problems.append(Problem(lineno, f"invalid header keyword {key!r}"))
            continue
        stage.header[key] = val
        stage.header_lines[key] = lineno


def _parse_stage(first_line: int, text: str, problems: list[Problem]) -> Stage | None:
    stage = Stage(line=first_line)
    header: list[tuple[int, str]] = []
    current: Section | None = None
    body: list[str] = []
    for offset, raw in enumerate(text.split("\n")):
        lineno = first_line + offset
        words = raw.split()
        if words and words[0].startswith("%"):
            if current is not None:
                current.body = "\n".join(body)
            name, _, args = raw.strip()[1:].partition(" ")
            current = Section(name=name.lower(), args=args.strip(), body="", line=lineno)
            stage.sections.append(current)
            body = []
        elif current is None:
            header.append((lineno, raw))
        else:
            body.append(raw)
    if current is not None:
        current.body = "\n".join(body)
    _parse_header(header, stage, problems)
    for sec in stage.sections:
        if sec.name in APP_SECTIONS:
            if not sec.args.split():
                problems.append(Problem(sec.line, f"%{sec.name} needs an app name"))
        elif sec.name not in SECTIONS:
            problems.append(Problem(sec.line, f"invalid section %{sec.name}"))
    if not stage.header and not any(s.body.strip() or s.args for s in stage.sections):
        return None  # Apptainer skips empty stages (comments only)
    return stage


def _arguments(stage: Stage) -> dict[str, str]:
    defaults: dict[str, str] = {}
    for sec in stage.sections:
        if sec.name != "arguments":
            continue
        for line in sec.body.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, val = line.split("=", 1)
                if key.strip():
                    defaults[key.strip()] = val.strip()
    return defaults


def _check_build_args(
    first_line: int, text: str, stage: Stage, build_args: Mapping[str, str], used: set[str]
) -> list[Problem]:
    problems = []
    defaults = _arguments(stage)
    for m in _BUILD_ARG.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if _COMMENT_BEFORE.match(text[line_start : m.start()]):
            continue
        name = m.group(1)
        lineno = first_line + text.count("\n", 0, m.start())
        if name in build_args or name in defaults:
            used.add(name)
        else:
            problems.append(
                Problem(
                    lineno,
                    f"build arg {{{{ {name} }}}} has no --build-arg and no default "
                    "in this stage's %arguments",
                )
            )
    return problems


def _substitute(text: str, stage: Stage, build_args: Mapping[str, str]) -> str:
    values = {**_arguments(stage), **build_args}
    return _BUILD_ARG.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _check_stage_refs(stages: list[Stage]) -> list[Problem]:
    problems = []
    seen: set[str] = set()
    for stage in stages:
        agent = stage.header.get("bootstrap", "")
        if not agent:
            problems.append(Problem(stage.line, "stage has no Bootstrap header"))
        elif agent not in AGENT_REQUIRES:
            problems.append(Problem(stage.line, f"invalid build source {agent!r}"))
        else:
            for key in AGENT_REQUIRES[agent]:
                if not stage.header.get(key):
                    problems.append(Problem(stage.line, f"Bootstrap: {agent} needs a {key} header"))
        for sec in stage.sections:
            args = sec.args.split("#")[0].split()
            if sec.name == "files" and args:
                if len(args) != 2 or args[0].lower() != "from":
                    problems.append(
                        Problem(sec.line, f"%files takes 'from STAGE', not {sec.args!r}")
                    )
                elif args[1] not in seen:
                    problems.append(
                        Problem(sec.line, f"%files from {args[1]}: no earlier stage of that name")
                    )
        if stage.name:
            if stage.name in seen:
                problems.append(Problem(stage.line, f"stage name {stage.name!r} used twice"))
            seen.add(stage.name)
    return problems


def parse(text: str, build_args: Mapping[str, str] | None = None) -> Definition:
    """Parse and check ``text`` as ``apptainer build`` would with these ``--build-arg`` values."""
    build_args = dict(build_args or {})
    problems: list[Problem] = []
    stages: list[Stage] = []
    used: set[str] = set()
    for first_line, chunk in _split_stages(text):
        raw_stage = _parse_stage(first_line, chunk, [])
        if raw_stage is None:
            continue
        problems += _check_build_args(first_line, chunk, raw_stage, build_args, used)
        stage = _parse_stage(first_line, _substitute(chunk, raw_stage, build_args), problems)
        if stage is not None:
            stages.append(stage)
    if not stages:
        problems.append(Problem(1, "empty definition file"))
    problems += _check_stage_refs(stages)
    unused = sorted(set(build_args) - used)
    if unused:
        problems.append(Problem(1, f"unused build args: {' '.join(unused)}"))
    return Definition(stages=stages, problems=sorted(set(problems), key=lambda p: p.line))


# Variables that decide a process's rank or its devices: never baked into %environment.
RANK_OR_DEVICE_VARS = re.compile(
    r"\b(CUDA_VISIBLE_DEVICES|ZE_AFFINITY_MASK|ZE_FLAT_DEVICE_HIERARCHY|ROCR_VISIBLE_DEVICES|"
    r"HIP_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|(PALS|PMI|PMIX|SLURM|OMPI|JSM|MPI|COBALT|PBS|LSB)_\w+)"
)


def check_policy(defn: Definition) -> list[Problem]:
    """Our rules for a dask-hpc image, on top of the grammar (call on a parsed file)."""
    problems: list[Problem] = []
    if len(defn.stages) < 2:
        problems.append(Problem(1, "needs two stages: build the stack, then a slim runtime"))
        return problems
    final = defn.stages[-1]
    if not any(s.name == "files" and s.args.split()[:1] == ["from"] for s in final.sections):
        problems.append(Problem(final.line, "the runtime stage copies nothing from a build stage"))
    for name in ("help", "labels", "environment", "runscript", "test"):
        if final.section(name) is None:
            problems.append(Problem(final.line, f"the runtime stage has no %{name}"))
    run = final.section("runscript")
    if run and 'exec start-cluster "$@"' not in run.body:
        problems.append(Problem(run.line, '%runscript must be: exec start-cluster "$@"'))
    env = final.section("environment")
    if env:
        if not re.search(r"\bPYTHONNOUSERSITE=1\b", env.body):
            problems.append(Problem(env.line, "%environment must export PYTHONNOUSERSITE=1"))
        for offset, line in enumerate(env.body.splitlines(), start=1):
            m = RANK_OR_DEVICE_VARS.search(line.split("#")[0])
            if m:
                problems.append(
                    Problem(
                        env.line + offset,
                        f"%environment sets {m.group(1)}: "
                        "rank and device variables must come from the launcher",
                    )
                )
    labels = final.section("labels")
    if labels:
        keys = {ln.split()[0] for ln in labels.body.splitlines() if ln.split()}
        for key in ("org.dask-hpc.site", "org.dask-hpc.version", "org.dask-hpc.gpu-runtime"):
            if key not in keys:
                problems.append(Problem(labels.line, f"%labels lacks {key}"))
    return problems


def check_text(
    text: str, build_args: Mapping[str, str] | None = None, policy: bool = True
) -> list[Problem]:
    """Every grammar problem in ``text`` (and, with ``policy``, every dask-hpc rule broken)."""
    defn = parse(text, build_args)
    problems = list(defn.problems)
    if policy and defn.ok:
        problems += check_policy(defn)
    return problems
