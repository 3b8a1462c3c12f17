"""The package's layout, read from its source (ast): which subpackage may import which, one way,
with no cycle (docs/architecture.md draws it). Each subpackage's docstring says what it may
import; this keeps the two the same and the code to both."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO

SRC = REPO / "src" / "dask_hpc"

# What each part may import, bottom up: a subpackage or a module at the top of the package.
# The package's __init__ (the public facade) is checked apart: every import loads it first.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "config": set(),
    "at_scale": set(),
    "guard": {"errors", "config"},
    "planning": {"errors", "config", "guard"},
    "running": {"errors", "config", "guard", "planning", "at_scale"},
    "batch": {"errors", "config", "guard", "planning"},
    "cli": {"errors", "guard", "planning", "running"},
    "images": {"guard"},  # python -m dask_hpc.images, the documented command
    # a SIF's file system as the image another runtime takes (invoke build's hooks)
    "images_enroot": {"guard", "planning"},
    "images_podman": {"guard", "planning", "images_enroot"},
    "elastic": {"errors", "config", "guard", "planning", "at_scale", "batch", "cli"},
    # the console scripts' first code (search paths made safe), then each program's main
    "entry": {"guard", "cli", "batch", "elastic"},
    "__main__": {"entry"},
}
SUBPACKAGES = sorted(p.parent.name for p in SRC.glob("*/__init__.py"))


def part_of(path: Path) -> str:
    """``src/dask_hpc/running/rank.py`` -> ``running``; ``src/dask_hpc/cli.py`` -> ``cli``."""
    first = path.relative_to(SRC).parts[0]
    return first.removesuffix(".py")


def package_of(path: Path) -> list[str]:
    return ["dask_hpc", *path.relative_to(SRC).parent.parts]


def imports(path: Path) -> Iterator[tuple[str, str, bool]]:
    """(absolute module, name imported from it or "", at the module's top) for each import of
    the package's own code in ``path``, lazy ones included."""
    tree = ast.parse(path.read_text())
    lazy = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dask_hpc":
                    yield alias.name, "", id(node) not in lazy
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(path)[: len(package_of(path)) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] == "dask_hpc":
                for alias in node.names:
                    yield module, alias.name, id(node) not in lazy


def target(module: str, name: str) -> str:
    """The part an import reaches: ``dask_hpc.guard.private`` -> ``guard``; ``from dask_hpc
    import errors`` -> ``errors``; a name of the package's __init__ -> ``__init__``."""
    parts = module.split(".")[1:]
    if parts:
        return parts[0]
    known = {p.stem for p in SRC.glob("*.py")} | set(SUBPACKAGES)
    return name if name in known - {"__init__"} else "__init__"


def edges() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        part = part_of(path)
        if part in ("__init__", "_version"):
            continue
        for module, name, _ in imports(path):
            reached = target(module, name)
            if reached == "__init__":
                assert name == "__version__", f"{path.relative_to(REPO)} imports {name} from "
                "the package's __init__: import it from where it lives"
                continue
            if reached != part:
                found.setdefault(part, set()).add(reached)
    return found


def test_every_part_has_its_rule() -> None:
    parts = {part_of(p) for p in SRC.rglob("*.py")} - {"__init__", "_version"}
    assert parts == set(MAY_IMPORT), "place a new module or subpackage in MAY_IMPORT"


def test_imports_go_one_way() -> None:
    wrong = {
        f"{part} -> {reached}"
        for part, reached_all in edges().items()
        for reached in reached_all - MAY_IMPORT[part]
    }
    assert not wrong, f"imports against the layout (docs/architecture.md): {sorted(wrong)}"


def test_no_cycle() -> None:
    """MAY_IMPORT itself has no cycle, so what obeys it has none."""
    done: set[str] = set()

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, f"cycle: {' -> '.join([*path, part])}"
        if part not in done:
            for below in MAY_IMPORT[part]:
                visit(below, (*path, part))
            done.add(part)

    for part in MAY_IMPORT:
        visit(part, ())


def test_the_facade_imports_lazily() -> None:
    """``import dask_hpc`` (every rank's first import) loads its version and nothing else of
    ours: connect and HPCCluster import their modules when first used."""
    at_top = [
        module for module, _, top in imports(SRC / "__init__.py") if top and module != "dask_hpc"
    ]
    assert at_top == ["dask_hpc._version"], at_top


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_each_subpackage_says_what_it_may_import(subpackage: str) -> None:
    doc = ast.get_docstring(ast.parse((SRC / subpackage / "__init__.py").read_text())) or ""
    paragraph = next((p for p in doc.split("\n\n") if p.startswith("May import:")), None)
    assert paragraph, f"{subpackage}/__init__.py: no 'May import:' paragraph"
    sentence = paragraph.split(". ")[0]
    named = set(re.findall(r"``(\w+)``", sentence))
    assert named == MAY_IMPORT[subpackage], (subpackage, sentence)
