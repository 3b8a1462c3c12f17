"""The advisory table (deploy/advisories.yaml) and every range the repository declares.

A declaration is one place that names a package of the table with a version range: a
requirement in pyproject.toml (dependencies, every extra, requires-python as ``python``),
constraints.txt or spack/envs/*/pypi.txt, a pin in a script or definition of tests/setup/,
ansible/ or containers/, or a Spack spec (spack.yaml, spack/**/*.yaml, spack/repo's recipes).
tests/test_advisories.py checks each against the table; tests/test_dependencies.py reads
distributed's entries from here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "deploy" / "advisories.yaml"
FIELDS = {"id", "package", "affected", "fixed", "what", "source", "read"}
#: The Python releases a requirement's marker is evaluated for.
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
#: Where scripts and definitions may pin a package (pip arguments, package lists).
PIN_DIRS = ("tests/setup", "ansible", "containers")
_OP = r"(?:===|==|>=|<=|~=|!=|<|>)"


@dataclass(frozen=True)
class Declared:
    """One range: the package, its specifier, the marker it holds under, and where."""

    package: str
    spec: SpecifierSet
    marker: Marker | None
    where: str


def load_table(path: Path = TABLE) -> list[dict[str, Any]]:
    """The table's entries, each with ``affected`` as SpecifierSets; malformed -> ValueError."""
    entries = (yaml.safe_load(path.read_text()) or {}).get("advisories") or []
    for entry in entries:
        missing = FIELDS - set(entry)
        if missing:
            raise ValueError(f"{path}: {entry.get('id')} lacks {sorted(missing)}")
        entry["package"] = canonicalize_name(entry["package"])
        entry["affected"] = [SpecifierSet(s) for s in entry["affected"]]
        fixed = Version(str(entry["fixed"]))
        if any(fixed in s for s in entry["affected"]):
            raise ValueError(f"{path}: {entry['id']}: fixed {fixed} is inside its affected ranges")
    return entries


def lower_bound(spec: SpecifierSet) -> tuple[Version, bool] | None:
    """The lowest version ``spec`` admits as (version, inclusive); None when unbounded below."""
    best: tuple[Version, bool] | None = None
    for s in spec:
        text = s.version.removesuffix(".*")
        if s.operator in (">=", "==", "===", "~="):
            bound = (Version(text), True)
        elif s.operator == ">":
            bound = (Version(text), False)
        else:
            continue
        if best is None or bound[0] > best[0] or (bound[0] == best[0] and not bound[1]):
            best = bound
    return best


def admits_affected(spec: SpecifierSet, affected: list[SpecifierSet]) -> SpecifierSet | None:
    """The affected range ``spec`` overlaps, else None (also for ``spec`` unbounded below).

    Both are unions of intervals whose ends are the versions they name, so testing each named
    version, one just above it and one just below it finds any overlap.
    """
    if lower_bound(spec) is None:
        return affected[0]
    for rng in affected:
        points: set[Version] = set()
        for s in [*spec, *rng]:
            v = Version(s.version.removesuffix(".*"))
            points |= {v, Version(f"{v.base_version}.1")} | _just_below(v)
        if any(p in spec and p in rng for p in points):
            return rng
    return None


def _just_below(v: Version) -> set[Version]:
    """A release just below ``v`` (``6.5.5`` -> ``6.5.4.999999``), none below ``0``."""
    release = list(v.release)
    while release and release[-1] == 0:
        release.pop()
    if not release:
        return set()
    release[-1] -= 1
    return {Version(".".join(map(str, [*release, 999999])))}


def _requirement(text: str, where: str, names: set[str]) -> Declared | None:
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    name = canonicalize_name(req.name)
    return Declared(name, req.specifier, req.marker, where) if name in names else None


def pyproject(names: set[str], root: Path = ROOT) -> list[Declared]:
    """pyproject.toml's dependencies, every extra and requires-python (as ``python``)."""
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    lists = {"dependencies": project.get("dependencies", [])}
    lists |= {f"[{k}]": v for k, v in project.get("optional-dependencies", {}).items()}
    found = [
        d
        for key, reqs in lists.items()
        for r in reqs
        if (d := _requirement(r, f"pyproject.toml {key}", names))
    ]
    if "python" in names:
        found.append(
            Declared(
                "python",
                SpecifierSet(project.get("requires-python", "")),
                None,
                "pyproject.toml requires-python",
            )
        )
    return found


def requirement_files(names: set[str], root: Path = ROOT) -> list[Declared]:
    """constraints.txt and spack/envs/*/pypi.txt, one requirement a line."""
    files = [root / "constraints.txt", *sorted((root / "spack" / "envs").glob("*/pypi*.txt"))]
    found = []
    for path in files:
        for num, line in enumerate(path.read_text().splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if line and (d := _requirement(line, f"{path.relative_to(root)}:{num}", names)):
                found.append(d)
    return found


def pins(names: set[str], root: Path = ROOT) -> list[Declared]:
    """Pins in tests/setup, ansible/ and containers/: ``name<op>version`` anywhere, and a bare
    name among the arguments of a pip install or of tests/setup's uv_install (unbounded)."""
    found = []
    for sub in PIN_DIRS:
        for path in sorted(p for p in (root / sub).rglob("*") if p.is_file()):
            if path.suffix not in {".sh", ".yml", ".yaml", ".def", ".txt", ".cfg", ".j2", ""}:
                continue
            lines = path.read_text(errors="replace").splitlines()
            for num, line in enumerate(lines, 1):
                where = f"{path.relative_to(root)}:{num}"
                for name in names:
                    pat = re.escape(name).replace(r"\-", "[-_.]")
                    ranged = rf"(?<![\w.-]){pat}(?:\[[^\]]*\])?\s*({_OP}\s*[0-9][^\s'\"]*)"
                    for m in re.finditer(ranged, line, re.I):
                        found.append(Declared(name, SpecifierSet(m.group(1)), None, where))
                    bare = rf"(?<![\w.$/-]){pat}(?=[\s'\"]|$)"
                    installs = not line.lstrip().startswith("#") and re.search(
                        r"\bpip3?\b.*\binstall\b|\buv_install\b", line
                    )  # a command's, not a comment's (uv_install.sh's says "PYTHON -m pip install")
                    if installs and re.search(bare, line, re.I):
                        found.append(Declared(name, SpecifierSet(), None, where))
    return found


def spack_spec(text: str) -> SpecifierSet:
    """A Spack version constraint (``@A:B``, ``@A:``, ``@:B``, ``@=A``, ``@A``) as PEP 440."""
    m = re.match(r"@=?([0-9][0-9.]*)?(:)?([0-9][0-9.]*)?", text.strip())
    if not m or (not m.group(1) and not m.group(3)):
        return SpecifierSet()
    low, colon, high = m.groups()
    if not colon:
        return SpecifierSet(f"=={low}" if text.strip().startswith("@=") else f"=={low}.*")
    parts = [f">={low}"] if low else []
    if high:  # Spack's :B includes every B.x
        parts.append(f"<={high}" if high.count(".") >= 2 else f"<{_next(high)}")
    return SpecifierSet(",".join(parts))


def _next(version: str) -> str:
    release = [int(x) for x in version.split(".")]
    release[-1] += 1
    return ".".join(map(str, release))


def _spack_name(package: str) -> str:
    return "python" if package == "python" else f"py-{package}"


def spack(names: set[str], root: Path = ROOT) -> list[Declared]:
    """Spack specs naming py-<package>: environments' requires and specs, recipes' depends_on,
    and the versions our recipes add."""
    wanted = {_spack_name(n): n for n in names if n != "python"}
    strings: list[tuple[str, str]] = []
    yamls = [root / "spack.yaml", *sorted((root / "spack").rglob("*.yaml"))]
    for path in yamls:
        text = yaml.safe_load(path.read_text()) or {}
        scope = text if isinstance(text, dict) else {}
        scope = scope["spack"] if isinstance(scope.get("spack"), dict) else scope
        rel = str(path.relative_to(root))
        for pkg, sec in (scope.get("packages") or {}).items():
            for req in (sec or {}).get("require", []) if isinstance(sec, dict) else []:
                for item in [req] if isinstance(req, str) else [req.get("spec", "")]:
                    item = item.strip()
                    strings.append((f"{pkg}{item}" if item.startswith("@") else item, rel))
        # root specs: only a version they add (packages:require bounds the bare names)
        roots = [str(s) for s in scope.get("specs") or []]
        for block in scope.get("definitions") or []:
            roots += [str(s) for k, v in block.items() if k != "when" for s in v or []]
        strings += [(s, rel) for s in roots if "@" in s]
    recipes = sorted((root / "spack" / "repo").rglob("package.py"))
    for path in recipes:
        rel = str(path.relative_to(root))
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            arg = call.args[0] if call.args else None
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                continue
            if call.func.id == "depends_on":
                strings.append((arg.value, rel))
            elif call.func.id == "version" and path.parent.name.replace("_", "-") in wanted:
                strings.append((f"{path.parent.name.replace('_', '-')}@={arg.value}", rel))
    found = []
    for spec, rel in strings:
        for m in re.finditer(r"(?:^|[\s^])(py-[a-z0-9-]+)(@[=0-9:.]*)?", spec):
            if m.group(1) in wanted and not spec.startswith("$"):
                found.append(
                    Declared(
                        wanted[m.group(1)], spack_spec(m.group(2) or ""), None, f"{rel}: {spec}"
                    )
                )
    return found


def declared(names: set[str], root: Path = ROOT) -> list[Declared]:
    """Every declaration of the named packages in the repository."""
    return [
        *pyproject(names, root),
        *requirement_files(names, root),
        *pins(names, root),
        *spack(names, root),
    ]


def excused(entry: dict[str, Any], decl: Declared, root: Path = ROOT) -> bool:
    """The entry's ``excused`` covers ``decl``: its marker holds wherever decl's does, and the
    file it names lacks the pattern that would reach the advisory."""
    excuse = entry.get("excused")
    if not excuse:
        return False
    if "absent_in" in excuse:
        text = (root / excuse["absent_in"]).read_text()
        if re.search(excuse["absent"], text):
            return False
    if "marker" in excuse:
        limit = Marker(excuse["marker"])
        applies = [
            p
            for p in PYTHONS
            if decl.marker is None or decl.marker.evaluate({"python_version": p, "extra": ""})
        ]
        return bool(applies) and all(limit.evaluate({"python_version": p}) for p in applies)
    return True
