"""Dask-hpc's Spack files read without Spack: environments with their includes, the
project's recipes (with :mod:`ast`, never imported), pyproject.toml's pins, site profiles.
Used by the checks in :mod:`.spackcheck`, :mod:`.spack_sites` and :mod:`.spack_upstream`."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from . import versions

_NAME = r"[a-z0-9][a-z0-9-]*"
_SPEC_NAME = re.compile(rf"^\s*({_NAME})(?=[\s@+~%^]|$)")
_DEP_NAME = re.compile(rf"[\^%]\s*(?:[a-z]+(?:,[a-z]+)*=)?({_NAME})")
PIN = re.compile(r"@=?([0-9][0-9A-Za-z.]*)")
RANGE = re.compile(r"@([0-9][0-9.]*:[0-9.]*)")


class SpackCheckError(Exception):
    """Raised by the checks (:func:`.spackcheck.check`) with every problem found, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_yaml(path: Path) -> Any:
    """Read a YAML file; a missing or malformed file raises SpackCheckError."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpackCheckError([f"{path}: cannot read YAML: {exc}"]) from exc


def spec_names(spec: str) -> list[str]:
    """Package names in a spec string: the root and every ``^dep``/``%compiler``."""
    if spec.startswith("$"):
        return []
    names = []
    root = _SPEC_NAME.match(spec)
    if root:
        names.append(root.group(1))
    names.extend(_DEP_NAME.findall(spec))
    return names


def version_tuple(text: str) -> tuple[int, ...]:
    """``'12.4.1'`` -> ``(12, 4, 1)`` (leading numeric components only)."""
    parts = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def spack_range_for(pip_spec: str) -> str | None:
    """Spack's range for a pip specifier of the form ``>=A`` or ``>=A,<B``.

    ``>=3.1,<3.10`` -> ``3.1:3.9`` (Spack's ``:3.9`` includes every 3.9.x); ``>=3.1``
    -> ``3.1:``. None for anything else (an upper bound ending in 0 beyond the first
    component, ``==``, ``!=``...), which the caller reports.
    """
    parts = dict(
        (m.group(1), m.group(2))
        for m in (re.fullmatch(r"(>=|<)\s*([0-9][0-9.]*)", p.strip()) for p in pip_spec.split(","))
        if m
    )
    if ">=" not in parts or len(parts) != len(pip_spec.split(",")):
        return None
    if "<" not in parts:
        return f"{parts['>=']}:"
    upper = list(version_tuple(parts["<"]))
    while len(upper) > 1 and upper[-1] == 0:
        upper.pop()
    if not upper or upper[-1] == 0:
        return None
    upper[-1] -= 1
    return f"{parts['>=']}:{'.'.join(map(str, upper))}"


def pyproject_info(root: Path) -> dict[str, Any]:
    """Dependency names and specifiers from pyproject.toml, exact pins from constraints.txt."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = None  # type: ignore[assignment]
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        deps: list[str] = project["dependencies"]
        extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    else:  # pragma: no cover - only on 3.10
        deps = re.findall(
            r'^\s*"([^"]+)",?\s*$', text.split("dependencies", 1)[1].split("]")[0], re.M
        )
        extras = {"cuda": re.findall(r'"(dask-cuda[^"]*)"', text)}
    pins: dict[str, str] = {}
    names: dict[str, str] = {}
    full: dict[str, str] = {}
    for dep in deps + extras.get("cuda", []):
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", dep)
        if not m:
            continue
        name = m.group(1).lower().replace("_", "-")
        names[name] = m.group(3)
        full[name] = re.sub(r"\s+", "", dep.split(";", 1)[0])
        exact = re.match(r"==\s*([0-9][0-9A-Za-z.*]*)$", m.group(3).strip())
        if exact:
            pins[name] = exact.group(1)
    if (root / versions.CONSTRAINTS).is_file():
        pins.update(versions.pins(root))
    return {
        "requirements": names,
        "full": full,
        "pins": pins,
        "runtime": [n for n in names if n != "dask-cuda"],
    }


def read_env(env_dir: Path) -> tuple[dict[str, Any], list[tuple[Path, dict[str, Any]]]]:
    """An environment's ``spack:`` mapping and its included files (path, content)."""
    manifest = env_dir / "spack.yaml"
    data = load_yaml(manifest)
    if not isinstance(data, dict) or not isinstance(data.get("spack"), dict):
        raise SpackCheckError([f"{manifest}: no top-level 'spack:' mapping"])
    env = data["spack"]
    included = []
    for entry in env.get("include", []) or []:
        rel = entry.get("path") if isinstance(entry, dict) else entry
        path = (env_dir / str(rel)).resolve()
        content = load_yaml(path) if path.is_file() else None
        if content is not None and not isinstance(content, dict):
            raise SpackCheckError([f"{path}: included file is not a mapping"])
        included.append((path, content or {}))
    return env, included


def requires_of(section: Any) -> list[str]:
    """The ``require:`` strings of one ``packages:`` entry."""
    if not isinstance(section, dict):
        return []
    req = section.get("require", [])
    if isinstance(req, str):
        return [req]
    out = []
    for item in req or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for key in ("spec", "one_of", "any_of"):
                val = item.get(key)
                out.extend([val] if isinstance(val, str) else list(val or []))
    return out


def externals_of(section: Any) -> list[str]:
    """The external spec strings of one ``packages:`` entry."""
    if not isinstance(section, dict):
        return []
    return [
        e["spec"]
        for e in section.get("externals", []) or []
        if isinstance(e, dict) and isinstance(e.get("spec"), str)
    ]


class Scopes:
    """An environment merged with its includes, enough for the checks below."""

    def __init__(self, env: dict[str, Any], included: list[tuple[Path, dict[str, Any]]]):
        self.scopes = [env] + [content for _, content in included]

    def packages(self) -> Iterator[tuple[str, Any]]:
        for scope in self.scopes:
            yield from (scope.get("packages") or {}).items()

    def requires(self, name: str) -> list[str]:
        return [r for pkg, sec in self.packages() if pkg == name for r in requires_of(sec)]

    def externals(self, name: str) -> list[str]:
        return [e for pkg, sec in self.packages() if pkg == name for e in externals_of(sec)]

    def definitions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for scope in self.scopes:
            for block in scope.get("definitions") or []:
                for key, val in block.items():
                    if key != "when":
                        out.setdefault(key, []).extend(str(v) for v in val or [])
        return out

    def specs(self) -> list[str]:
        """Root specs with ``$name`` definitions expanded."""
        defs = self.definitions()
        out = []
        for spec in self.scopes[0].get("specs") or []:
            spec = str(spec)
            out.extend(defs.get(spec[1:], [spec]) if spec.startswith("$") else [spec])
        return out

    def all_spec_strings(self) -> list[str]:
        strings = self.specs()
        for values in self.definitions().values():
            strings.extend(values)
        for _pkg, sec in self.packages():
            strings.extend(requires_of(sec))
            strings.extend(externals_of(sec))
        return strings


def recipe_info(path: Path) -> dict[str, Any]:
    """Classes, bases, versions and ``depends_on`` specs of a package.py, via ast."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    versions: dict[str, dict[str, str]] = {}
    depends: list[str] = []
    for cls in classes:
        for call in ast.walk(cls):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            first = call.args[0] if call.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            kwargs = {
                k.arg: k.value.value
                for k in call.keywords
                if k.arg and isinstance(k.value, ast.Constant)
            }
            if call.func.id == "version":
                versions[first.value] = kwargs
            elif call.func.id == "depends_on":
                depends.append(first.value)
    return {
        "classes": {
            c.name: [imports.get(ast.unparse(b), ast.unparse(b)) for b in c.bases] for c in classes
        },
        "versions": versions,
        "depends": depends,
    }


def class_name(pkg_dir: str) -> str:
    """Spack's class name for a package directory: ``py_dask_hpc`` -> ``PyDaskHpc``."""
    return "".join(part.capitalize() for part in pkg_dir.lstrip("_").split("_"))


def our_repo(root: Path) -> Path:
    """The project's Spack repository (the directory holding repo.yaml)."""
    return root / "spack" / "repo" / "spack_repo" / "dask_hpc"


def known_builtin(root: Path) -> set[str]:
    """Builtin package names recorded in spack/builtin-packages.txt."""
    path = root / "spack" / "builtin-packages.txt"
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(line)
    return names


def site_data(root: Path, name: str) -> dict[str, Any]:
    """Site profile ``name`` (``{"name": name}`` for local) with ``containers/<name>.yaml``."""
    profile = root / "src" / "dask_hpc" / "sites" / f"{name}.yaml"
    site = dict(load_yaml(profile) or {}) if profile.is_file() else {"name": name}
    site["build"] = load_yaml(root / "containers" / f"{name}.yaml") or {}
    return site
